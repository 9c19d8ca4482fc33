"""Evaluations on a real run (:mod:`gyrectl.rollout.evals` says what they are): due once a server
serves weights the plan evaluates, started as eval harnesses pinned to those weights, scored into
``trajectories/eval-executions.jsonl``, summed up into ``evals.jsonl``, and reported to the
coordinator as ``EvalEnded`` (the step after an evaluated version may wait for it)."""

from __future__ import annotations

import dataclasses
import threading
import time

from gyrectl.coordinator.events import EvalEnded
from gyrectl.gateway.control import GatewayControl
from gyrectl.rollout.evals import EvalPlan, summary
from gyrectl.rollout.harnesses import Harnesses, HarnessExit
from gyrectl.rollout.outbox import Outbox
from gyrectl.rollout.records import ExecutionRecord, lost_record, scored_record
from gyrectl.rollout.reward import Verifier, score_execution
from gyrectl.rollout.tasks import Assignment, rerun_id
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender, read_records


class EvalDriver:
    def __init__(self, *, run: RunDir, plan: EvalPlan, gateway: GatewayControl, harnesses: Harnesses,
                 verifier: Verifier, outbox: Outbox):
        self._run, self._plan, self._gateway, self._harnesses = run, plan, gateway, harnesses
        self._verifier, self._outbox = verifier, outbox
        self._lock = threading.Lock()  # serving() is called from the cells' reload threads
        self._due: list[int] = []
        self._seen: set[int] = set()
        self._records: dict[int, list[ExecutionRecord]] = {}
        self._log = JsonlAppender(run.eval_executions_file)

    def take_over(self) -> None:
        """Versions a head before this one evaluated are not again; one whose evaluation was cut
        runs it again once a server serves it (the next step may be waiting for it: eval.blocking,
        or the run's end: eval.at_end). The newest evaluated version is reported again, in case
        the old head wrote its line but ended before its ``EvalEnded`` reached the journal
        (folding it twice changes nothing)."""
        evaluated = {line["weight_version"] for line in read_records(self._run.evals_file)
                     if isinstance(line.get("weight_version"), int)}
        self._seen |= evaluated
        if evaluated:
            self._outbox.emit(EvalEnded(version=max(evaluated), at=time.time()))

    def serving(self, version: int) -> None:
        """A server serves weights ``version`` from now on: its evaluation is due if it is one."""
        with self._lock:
            if self._plan.due(version) and version not in self._seen:
                self._seen.add(version)
                self._due.append(version)

    def start_due(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for version in due:
            self._records[version] = []
            for assignment in self._plan.assignments(version):
                self._start(assignment, version)

    def evaluating(self) -> set[int]:
        """Weights versions whose evaluation is due or running."""
        with self._lock:
            return set(self._due) | set(self._records)

    def finish(self, ended: HarnessExit, version: int) -> None:
        scored = score_execution(self._verifier, ended.assignment.task, ended.output, timed_out=ended.timed_out)
        record = scored_record(ended, scored, eval=version)
        self._log.append(record.to_json())
        records = self._records[version]
        records.append(record)
        if len(records) == len(self._plan.tasks) * self._plan.executions_per_task:
            line = summary([r.to_json() for r in records], version=version, k=self._plan.executions_per_task,
                           pass_threshold=self._plan.pass_threshold)
            with JsonlAppender(self._run.evals_file) as out:
                out.append({**line, "at": time.time()})
            del self._records[version]
            self._outbox.emit(EvalEnded(version=version, at=time.time()))

    def run_again(self, lost: HarnessExit, version: int) -> None:
        """An eval execution whose harness node was lost runs again under a new id."""
        again = dataclasses.replace(lost.assignment, execution=rerun_id(lost.assignment.execution))
        self._log.append(lost_record(lost, rerun=again.execution, eval=version).to_json())
        self._start(again, version)

    def close(self) -> None:
        self._log.close()

    def _start(self, assignment: Assignment, version: int) -> None:
        self._gateway.pin_version(assignment.execution, version)
        if self._plan.temperature is not None:
            self._gateway.set_sampling(assignment.execution, {"temperature": self._plan.temperature})
        self._harnesses.start(assignment, base_url=self._gateway.base_url(assignment.execution))
