"""The coordinator's ``Executions`` on a real run: agent harness processes (on the head, or by the
agents of harness nodes) talking to the head's gateway.

::

    dispatch(count) ──> harness processes (one per execution, OPENAI_BASE_URL = its gateway URL)
    poll()          <── harness exits: scored by the verifier, logged to executions.jsonl, handed
                        to the batch claims; eval executions to the eval driver; then the outbox
                        (Started / Finished / EvalEnded, the cells' WeightsSynced)

An infrastructure failure (no output, the verifier kept raising) counts as finished for
scheduling, but it is left out of the batch file: never trained, never a zero reward. Too many of
them end the run as failed (``rollout.infra_failures``, :mod:`gyrectl.rollout.failure_budget`),
quoting the latest one's exit code and stderr: a harness that cannot start must not run a
"completed" run that trained nothing. An execution whose harness node was lost is recorded as one
too (``rerun``: the id it runs again under, same sequence number and weights) and is not
finished: it runs again on another node.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

from gyrectl.config.schema import InfraFailureBudget
from gyrectl.coordinator.events import Event, Finished, Started
from gyrectl.gateway.control import GatewayControl
from gyrectl.rollout.claims import BatchClaims
from gyrectl.rollout.eval_driver import EvalDriver
from gyrectl.rollout.evals import eval_version
from gyrectl.rollout.failure_budget import FailureTally
from gyrectl.rollout.harnesses import Harnesses, HarnessExit, execution_logs, text_excerpt
from gyrectl.rollout.outbox import Outbox
from gyrectl.rollout.records import ExecutionRecord, lost_record, scored_record
from gyrectl.rollout.resume import CarriedOver
from gyrectl.rollout.reward import Verifier, score_execution
from gyrectl.rollout.tasks import assign, rerun_id
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender


class InfraFailures:
    """The failure budget on a real run: counts each ended training execution and, past the
    budget, fails the run through the outbox with what a user needs to mend the harness."""

    def __init__(self, run: RunDir, budget: InfraFailureBudget, outbox: Outbox):
        self._run, self._tally, self._outbox = run, FailureTally(budget), outbox

    def count(self, ended: HarnessExit, record: ExecutionRecord) -> None:
        if reason := self._tally.add(failed=not record.trainable):
            self._outbox.fail(f"{reason}. The latest: {self._detail(ended, record.error)}")

    def _detail(self, ended: HarnessExit, error: str) -> str:
        """Its exit code and what it said on stderr."""
        execution = ended.assignment.execution
        stderr = execution_logs(self._run) / f"{execution}.err"
        said = text_excerpt(stderr)
        return (f"{execution} on {ended.host or 'the head'}: {error} (exit code {ended.exit_code}); its stderr "
                f"({stderr}) " + (f"says:\n{said}" if said else "is empty"))


class LiveExecutions:
    def __init__(self, *, gateway: GatewayControl, harnesses: Harnesses, tasks: list[dict[str, Any]],
                 executions_per_task: int, verifier: Verifier, log: JsonlAppender, claims: BatchClaims,
                 outbox: Outbox, failures: InfraFailures, evals: EvalDriver | None = None,
                 stopping: Callable[[], bool] = lambda: False):
        """``log``: the executions log (shared with ``claims``); ``stopping()``: whether the run is
        being stopped."""
        self._gateway, self._harnesses, self._verifier = gateway, harnesses, verifier
        self._assign = functools.partial(assign, tasks=tasks, executions_per_task=executions_per_task)
        self._log, self._claims, self._outbox, self._failures = log, claims, outbox, failures
        self._evals, self._stopping = evals, stopping
        self._next_seq = 0
        self._version_of: dict[int, int] = {}

    def take_over(self, carried: CarriedOver, *, resume: int) -> None:
        """Continues a run another head started (``resume``: how many heads came before this
        one): next sequence numbers follow the journal's, finished executions wait for training,
        and the executions that were running start again from scratch under new ids."""
        self._next_seq = carried.next_seq
        if self._evals is not None:
            self._evals.take_over()
        self._claims.add(ExecutionRecord.from_json(line) for line in carried.finished)
        for seq, version in carried.running:
            again = self._assign(seq)
            again = dataclasses.replace(again, execution=f"{again.execution}-r{resume}")
            self._harnesses.start(again, base_url=self._gateway.base_url(again.execution))
            self._version_of[seq] = version

    def dispatch(self, *, count: int, version: int) -> None:
        for seq in range(self._next_seq, self._next_seq + count):
            assignment = self._assign(seq)
            self._harnesses.start(assignment, base_url=self._gateway.base_url(assignment.execution))
            self._version_of[seq] = version
        self._next_seq += count
        self._outbox.emit(Started(count=count, at=time.time()))

    def poll(self) -> list[Event]:
        self._outbox.check()  # a reason found during the last poll: its events are journaled by now
        # A harness that ends while the run is being stopped was most likely killed with it (Slurm
        # signals the whole job): it is left unfinished, so the next head runs it again instead of
        # recording an infrastructure failure that would never be trained.
        if not self._stopping():
            for ended in self._harnesses.reap():
                self._ended(ended)
                # an ended execution makes no more calls: the gateway drops its stickiness,
                # version pin and sampling fields
                self._gateway.forget_execution(ended.assignment.execution)
            if self._evals is not None:
                self._evals.start_due()
        return self._outbox.drain()

    def close(self) -> None:
        self._harnesses.stop_all()
        self._log.close()
        if self._evals is not None:
            self._evals.close()

    def _ended(self, ended: HarnessExit) -> None:
        version = eval_version(ended.assignment.execution)
        if version is not None:
            assert self._evals is not None, "an eval execution without an evaluation plan"
            if ended.lost_on:
                self._evals.run_again(ended, version)
            else:
                self._evals.finish(ended, version)
        elif ended.lost_on:
            self._run_again(ended)
        else:
            self._finish(ended)

    def _run_again(self, lost: HarnessExit) -> None:
        """An execution whose harness node was lost: recorded as an infrastructure failure and
        started again under a new id (same sequence number, weights and task)."""
        seq = lost.assignment.seq
        again = dataclasses.replace(lost.assignment, execution=rerun_id(lost.assignment.execution))
        self._log.append(lost_record(lost, rerun=again.execution, seq=seq,
                                     weight_version=self._version_of[seq]).to_json())
        self._harnesses.start(again, base_url=self._gateway.base_url(again.execution))

    def _finish(self, ended: HarnessExit) -> None:
        seq, version = ended.assignment.seq, self._version_of.pop(ended.assignment.seq)
        scored = score_execution(self._verifier, ended.assignment.task, ended.output, timed_out=ended.timed_out)
        status = "timed_out" if ended.timed_out and scored.status == "ok" else scored.status
        record = scored_record(ended, scored, status=status, seq=seq, weight_version=version)
        self._log.append(record.to_json())
        self._claims.add([record])
        self._outbox.emit(Finished(seq=seq, version=version, timed_out=ended.timed_out, at=ended.ended_at,
                                   infra_failure=not record.trainable, reward=record.reward))
        self._failures.count(ended, record)
