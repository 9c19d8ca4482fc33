"""The coordinator's ``RolloutGateway`` and ``Clock`` on a real run (local processes or Slurm
steps): executions are agent harness processes talking to the head's gateway, servers are the
cells' vLLM steps, and time is the wall clock.

::

    dispatch(count) ──> harness processes (one per execution, OPENAI_BASE_URL = its gateway URL)
    route(cell)     ──> gateway pool: add / drain each of the cell's server replicas
    sleep / wake    ──> the cell's drained replicas sleep while the cell trains, wake to return
    sync_weights    ──> background thread: live reload of checkpoints/vN into each replica
    place(cell)     ──> the cell's replicas on its new nodes (a lost cell placed again)
    poll()          <── harness exits (scored by the verifier, logged to executions.jsonl)
                        and finished reloads, as Started / Finished / WeightsSynced events
    claim(step)     ──> batches/step-N.json: the executions training step N consumes
    evaluations     ──> eval harnesses once a server serves due weights (gyrectl.rollout.evals):
                        scored into eval-executions.jsonl and evals.jsonl, never claimed

An infrastructure failure (no output, the verifier kept raising) counts as finished for
scheduling, but it is left out of the batch file: never trained, never a zero reward. Too many of
them end the run as failed (``rollout.infra_failures``, :mod:`gyrectl.rollout.failure_budget`),
quoting the latest one's exit code and stderr: a harness that cannot start must not run a
"completed" run that trained nothing. An
execution whose harness node was lost is recorded as one too (``rerun``: the id it runs again
under, same sequence number and weights) and is not finished: it runs again on another node.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gyrectl.config.schema import InfraFailureBudget
from gyrectl.coordinator.events import EvalEnded, Event, Finished, Started, WeightsSynced
from gyrectl.errors import RuntimeFailure
from gyrectl.gateway.control import GatewayControl
from gyrectl.cluster.base import Node
from gyrectl.rollout.evals import EvalPlan, eval_version, summary
from gyrectl.rollout.failure_budget import FailureTally
from gyrectl.rollout.harnesses import Harnesses, HarnessExit, execution_logs, text_excerpt
from gyrectl.rollout.http import ServerCallError, get
from gyrectl.rollout.replicas import CellServer
from gyrectl.rollout.resume import CarriedOver
from gyrectl.rollout.reward import Verifier, score_execution
from gyrectl.rollout.sleep import sleep_server, wake_server
from gyrectl.rollout.sync import WeightSync
from gyrectl.rollout.tasks import Assignment, assign, rerun_id
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender, read_records


@dataclass(frozen=True)
class _Done:
    seq: int
    execution: str
    version: int
    trainable: bool
    record: dict[str, Any]


class LiveRollouts:
    def __init__(self, *, run: RunDir, gateway: GatewayControl, harnesses: Harnesses,
                 tasks: list[dict[str, Any]], executions_per_task: int, batch_executions: int,
                 verifier: Verifier, servers: Sequence[Sequence[CellServer]],
                 replicas_of: Callable[[int, Sequence[Node]], Sequence[CellServer]],
                 weight_sync: WeightSync, server_key: str = "", poll_s: float = 0.25,
                 stopping: Callable[[], bool] = lambda: False, evals: EvalPlan | None = None,
                 infra_failures: InfraFailureBudget = InfraFailureBudget()):
        """``servers``: each cell's replicas; ``replicas_of(cell, nodes)``: a cell's replicas on
        other nodes (after ``place``)."""
        self._run, self._gateway, self._harnesses = run, gateway, harnesses
        self._tasks, self._per_task, self._batch = tasks, executions_per_task, batch_executions
        self._verifier, self._weight_sync = verifier, weight_sync
        self._servers, self._replicas_of = [tuple(cell) for cell in servers], replicas_of
        self._next_seq, self._poll_s, self._server_key = 0, poll_s, server_key
        self._stopping = stopping
        self._version_of: dict[int, int] = {}
        self._done: list[_Done] = []
        self._claimed: dict[int, list[_Done]] = {}
        self._log = JsonlAppender(run.executions_file)
        self._outbox: list[Event] = []
        self._lock = threading.Lock()  # the outbox (and the evals due) are shared with weight-sync threads
        self._failure: str | None = None
        """Why the run must stop (a weight sync failed, too many infrastructure failures): raised
        on the coordinator's thread by the next poll, once this poll's events are journaled."""
        self._tally = FailureTally(infra_failures)
        self._evals = evals
        self._evals_due: list[int] = []
        self._evals_seen: set[int] = set()
        self._eval_records: dict[int, list[dict[str, Any]]] = {}
        self._eval_log = JsonlAppender(run.eval_executions_file)
        self._reloads: list[tuple[int, int]] = []
        """``(cell, version)`` of each live reload under way, until a poll hands its ``WeightsSynced``
        to the coordinator: checkpoint retention keeps those folders (:meth:`reloading`)."""

    def take_over(self, carried: CarriedOver, *, resume: int) -> None:
        """Continues a run another head started (``resume``: how many heads came before this
        one): next sequence numbers follow the journal's, finished executions wait for training,
        and the executions that were running start again from scratch under new ids."""
        self._next_seq = carried.next_seq
        # Versions evaluated before are not again; one whose evaluation was cut runs it again
        # once a server serves it (the next step may be waiting for it: eval.blocking).
        self._evals_seen |= {line["weight_version"] for line in read_records(self._run.evals_file)
                             if isinstance(line.get("weight_version"), int)}
        self._done = [_Done(r["seq"], r["execution"], r["weight_version"], r["status"] != "infra_failure", r)
                      for r in carried.finished]
        for seq, version in carried.running:
            again = assign(seq, self._tasks, executions_per_task=self._per_task)
            again = dataclasses.replace(again, execution=f"{again.execution}-r{resume}")
            self._harnesses.start(again, base_url=self._gateway.base_url(again.execution))
            self._version_of[seq] = version

    # -- RolloutGateway --------------------------------------------------------------------
    def dispatch(self, *, count: int, version: int) -> None:
        for seq in range(self._next_seq, self._next_seq + count):
            assignment = assign(seq, self._tasks, executions_per_task=self._per_task)
            self._harnesses.start(assignment, base_url=self._gateway.base_url(assignment.execution))
            self._version_of[seq] = version
        self._next_seq += count
        self._emit(Started(count=count, at=time.time()))

    def ready(self, cell: int) -> bool:
        """Every replica of the cell answers (a multi-node engine answers once all its ranks joined)."""
        return all(self._healthy(server) for server in self._servers[cell])

    def route(self, cell: int, *, routed: bool, weight_version: int = 0) -> None:
        if routed:
            for server in self._servers[cell]:
                self._gateway.add_server(server.name, server.url, weight_version=weight_version)
            self._serving(weight_version)
            return
        known = {view.name for view in self._gateway.servers()}
        for server in self._servers[cell]:
            if server.name in known:
                self._gateway.drain_server(server.name)

    def sleep(self, cell: int, *, level: int) -> None:
        for server in self._servers[cell]:
            sleep_server(server.url, level=level, key=self._server_key)

    def wake(self, cell: int) -> None:
        for server in self._servers[cell]:
            wake_server(server.url, key=self._server_key)

    def sessions(self, cell: int) -> int:
        names = {server.name for server in self._servers[cell]}
        return sum(view.num_inflight for view in self._gateway.servers() if view.name in names)

    def replica_of(self, name: str) -> tuple[int, CellServer] | None:
        """The cell and replica the gateway knows as ``name`` (for ``servers.json``)."""
        for cell, servers in enumerate(self._servers):
            for server in servers:
                if server.name == name:
                    return cell, server
        return None

    def sync_weights(self, cell: int, version: int) -> None:
        with self._lock:
            self._reloads.append((cell, version))
        threading.Thread(target=self._sync, args=(cell, version), name=f"sync-cell{cell}", daemon=True).start()

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> int:
        chosen: list[_Done] = []
        for block, version, count in take:
            matching = [d for d in self._done if d.seq // self._batch == block and d.version == version]
            chosen += matching[:count]
        chosen.sort(key=lambda d: d.seq)
        claimed = {id(d) for d in chosen}
        self._done = [d for d in self._done if id(d) not in claimed]
        self._claimed = {index: chosen}  # only the step in progress can be abandoned
        batch_file = self._run.batch_file(index)
        self._run.write_json(batch_file, {
            "step": index, "weights_version": index,
            "executions": [{key: d.record[key] for key in ("execution", "task", "reward", "weight_version")}
                           for d in chosen if d.trainable],
            "left_out": [d.execution for d in chosen if not d.trainable]})
        for done in chosen:
            self._log.append({"execution": done.execution, "step": index})
        return sum(not d.trainable for d in chosen)

    def release(self, *, index: int) -> None:
        self._done = sorted(self._done + self._claimed.pop(index, []), key=lambda done: done.seq)

    def place(self, cell: int, nodes: Sequence[Node]) -> None:
        self._servers[cell] = tuple(self._replicas_of(cell, nodes))

    def poll(self) -> list[Event]:
        if self._failure is not None:
            raise RuntimeFailure(self._failure)
        # A harness that ends while the run is being stopped was most likely killed with it (Slurm
        # signals the whole job): it is left unfinished, so the next head runs it again instead of
        # recording an infrastructure failure that would never be trained.
        if not self._stopping():
            for ended in self._harnesses.reap():
                version = eval_version(ended.assignment.execution)
                if ended.lost_on:
                    self._run_again(ended, version)
                elif version is None:
                    self._finish(ended)
                else:
                    self._finish_eval(ended, version)
                self._forget(ended.assignment.execution)
            self._start_due_evals()
        with self._lock:
            events, self._outbox = self._outbox, []
            for event in events:  # from here on the coordinator's state says the cell serves it
                if isinstance(event, WeightsSynced):
                    self._reloads.remove((event.cell, event.version))
        return events

    # -- what checkpoint retention asks (gyrectl.launch.retention), on the coordinator's thread --
    def reloading(self) -> set[int]:
        """Weights versions a live reload is loading (or loaded, until the next poll reports it)."""
        with self._lock:
            return {version for _, version in self._reloads}

    def evaluating(self) -> set[int]:
        """Weights versions whose evaluation is due or running."""
        with self._lock:
            return set(self._evals_due) | set(self._eval_records)

    # -- Clock -----------------------------------------------------------------------------
    def now(self) -> float:
        return time.time()

    def wait(self) -> None:
        time.sleep(self._poll_s)

    # -- the edges ---------------------------------------------------------------------------
    def close(self) -> None:
        self._harnesses.stop_all()
        self._log.close()
        self._eval_log.close()

    def _serving(self, version: int) -> None:
        """A server serves weights ``version`` from now on: its evaluation is due if it is one."""
        with self._lock:
            if self._evals is not None and self._evals.due(version) and version not in self._evals_seen:
                self._evals_seen.add(version)
                self._evals_due.append(version)

    def _start_due_evals(self) -> None:
        with self._lock:
            due, self._evals_due = self._evals_due, []
        for version in due:
            assert self._evals is not None
            self._eval_records[version] = []
            for assignment in self._evals.assignments(version):
                self._start_eval(assignment, version)

    def _start_eval(self, assignment: Assignment, version: int) -> None:
        plan = self._evals
        assert plan is not None
        self._gateway.pin_version(assignment.execution, version)
        if plan.temperature is not None:
            self._gateway.set_sampling(assignment.execution, {"temperature": plan.temperature})
        self._harnesses.start(assignment, base_url=self._gateway.base_url(assignment.execution))

    def _run_again(self, lost: HarnessExit, eval_of: int | None) -> None:
        """An execution whose harness node was lost: recorded as an infrastructure failure and
        started again under a new id (same sequence number, weights and task)."""
        again = dataclasses.replace(lost.assignment, execution=rerun_id(lost.assignment.execution))
        record = {"execution": lost.assignment.execution, "task": lost.assignment.task["id"], "reward": None,
                  "status": "infra_failure", "error": f"harness node {lost.lost_on} was lost",
                  "exit_code": None, "started_at": lost.started_at, "ended_at": lost.ended_at,
                  "host": lost.lost_on, "rerun": again.execution}
        if eval_of is not None:
            self._eval_log.append({**record, "eval": eval_of})
            self._start_eval(again, eval_of)
            return
        self._log.append({**record, "seq": lost.assignment.seq, "weight_version": self._version_of[lost.assignment.seq]})
        self._harnesses.start(again, base_url=self._gateway.base_url(again.execution))

    def _finish_eval(self, ended: HarnessExit, version: int) -> None:
        plan, execution = self._evals, ended.assignment.execution
        assert plan is not None
        scored = score_execution(self._verifier, ended.assignment.task, ended.output, timed_out=ended.timed_out)
        record = {"execution": execution, "eval": version, "task": ended.assignment.task["id"],
                  "reward": scored.reward, "status": scored.status, "error": scored.error,
                  "exit_code": ended.exit_code, "started_at": ended.started_at, "ended_at": ended.ended_at,
                  "host": ended.host}
        self._eval_log.append(record)
        records = self._eval_records[version]
        records.append(record)
        if len(records) == len(plan.tasks) * plan.executions_per_task:
            line = summary(records, version=version, k=plan.executions_per_task, pass_threshold=plan.pass_threshold)
            with JsonlAppender(self._run.evals_file) as out:
                out.append({**line, "at": time.time()})
            del self._eval_records[version]
            self._emit(EvalEnded(version=version, at=time.time()))

    def _finish(self, ended: HarnessExit) -> None:
        seq, task = ended.assignment.seq, ended.assignment.task
        version = self._version_of.pop(seq)
        scored = score_execution(self._verifier, task, ended.output, timed_out=ended.timed_out)
        record = {"execution": ended.assignment.execution, "seq": seq, "task": task["id"],
                  "reward": scored.reward, "status": "timed_out" if ended.timed_out and scored.status == "ok"
                  else scored.status, "error": scored.error, "exit_code": ended.exit_code,
                  "weight_version": version, "started_at": ended.started_at, "ended_at": ended.ended_at,
                  "host": ended.host}
        self._log.append(record)
        failed = scored.status == "infra_failure"
        self._done.append(_Done(seq, ended.assignment.execution, version, not failed, record))
        self._emit(Finished(seq=seq, version=version, timed_out=ended.timed_out, at=ended.ended_at,
                            infra_failure=failed))
        if (reason := self._tally.add(failed=failed)) and self._failure is None:
            self._failure = f"{reason}. The latest: {self._failure_detail(ended, scored.error)}"

    def _failure_detail(self, ended: HarnessExit, error: str) -> str:
        """What a user needs to mend a harness: its exit code and what it said on stderr."""
        execution = ended.assignment.execution
        stderr = execution_logs(self._run) / f"{execution}.err"
        said = text_excerpt(stderr)
        return (f"{execution} on {ended.host or 'the head'}: {error} (exit code {ended.exit_code}); its stderr "
                f"({stderr}) " + (f"says:\n{said}" if said else "is empty"))

    def _forget(self, execution: str) -> None:
        """An ended execution makes no more calls: the gateway drops its stickiness, version pin
        and sampling fields."""
        self._gateway.forget_execution(execution)

    def _sync(self, cell: int, version: int) -> None:
        """Every replica of the cell reloads ``version`` (at once: each is its own engine); the
        cell has synced when all have."""
        servers = self._servers[cell]
        with ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix=f"sync-cell{cell}") as pool:
            failures = [f for f in pool.map(lambda server: self._sync_replica(server, version), servers) if f]
        if failures:  # reported on the coordinator's thread by the next poll
            if self.ready(cell):
                self._failure = f"weight sync of cell {cell} to v{version} failed: {'; '.join(failures)}"
            # else a server died under the reload: the coordinator sees its step exit and starts
            # new servers with the latest weights, which makes this reload moot
            with self._lock:
                self._reloads.remove((cell, version))
            return
        self._emit(WeightsSynced(cell=cell, version=version, at=time.time()))
        self._serving(version)

    def _sync_replica(self, server: CellServer, version: int) -> str:
        """What went wrong reloading ``version`` into one replica (empty: nothing)."""
        try:
            self._weight_sync.sync(server.url, self._run.weights_dir(version), version)
        except Exception as exc:
            return f"{server.name}: {exc}"
        if any(view.name == server.name for view in self._gateway.servers()):
            self._gateway.set_weight_version(server.name, version)
        return ""

    @staticmethod
    def _healthy(server: CellServer) -> bool:
        try:
            get(server.url + "/health", timeout_s=1.0)
        except ServerCallError:  # not listening yet, or still loading the weights
            return False
        return True

    def _emit(self, event: Event) -> None:
        with self._lock:
            self._outbox.append(event)
