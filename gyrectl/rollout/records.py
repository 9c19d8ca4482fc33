"""One ended execution as the head records it: a line of ``trajectories/executions.jsonl``
(training executions, later followed by a ``{"execution", "step"}`` line once a step claimed it)
or of ``trajectories/eval-executions.jsonl`` (evaluations)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gyrectl.rollout.harnesses import HarnessExit
from gyrectl.rollout.reward import Scored
from gyrectl.run.batch_file import BatchEntry

Status = Literal["ok", "timed_out", "infra_failure"]


@dataclass(frozen=True)
class ExecutionRecord:
    execution: str
    task: str
    reward: float | None
    """None for an infrastructure failure."""
    status: Status
    error: str
    exit_code: int | None
    started_at: float
    ended_at: float
    host: str
    seq: int | None = None
    """A training execution's sequence number (dispatch order)."""
    weight_version: int | None = None
    """The weights a training execution was dispatched with."""
    eval: int | None = None
    """The weights version an eval execution evaluated."""
    rerun: str = ""
    """Lost with its harness node: the id it runs again under."""

    @property
    def trainable(self) -> bool:
        return self.status != "infra_failure"

    def batch_entry(self, *, group: int) -> BatchEntry:
        """What a batch file says of it (a trainable training execution of GRPO group ``group``)."""
        assert self.trainable and self.reward is not None
        return BatchEntry(execution=self.execution, task=self.task, reward=self.reward,
                          weight_version=self.weight_version, group=group)

    def to_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {"execution": self.execution}
        if self.seq is not None:
            line["seq"] = self.seq
        if self.eval is not None:
            line["eval"] = self.eval
        line |= {"task": self.task, "reward": self.reward, "status": self.status, "error": self.error,
                 "exit_code": self.exit_code}
        if self.weight_version is not None:
            line["weight_version"] = self.weight_version
        line |= {"started_at": self.started_at, "ended_at": self.ended_at, "host": self.host}
        if self.rerun:
            line["rerun"] = self.rerun
        return line

    @classmethod
    def from_json(cls, line: dict[str, Any]) -> ExecutionRecord:
        """A line read back (a resumed head's carried-over executions): what it lacks of the
        run's details is left empty."""
        return cls(**{**_UNKNOWN_DETAILS, **{key: line[key] for key in _FIELDS if key in line}})


_FIELDS = tuple(ExecutionRecord.__dataclass_fields__)
_UNKNOWN_DETAILS = {"error": "", "exit_code": None, "started_at": 0.0, "ended_at": 0.0, "host": ""}


def scored_record(ended: HarnessExit, scored: Scored, *, status: Status | None = None, **where: Any) -> ExecutionRecord:
    """The record of an execution that ended and was scored (``where``: ``seq`` and
    ``weight_version``, or ``eval``)."""
    return ExecutionRecord(execution=ended.assignment.execution, task=ended.assignment.task["id"],
                           reward=scored.reward, status=status or scored.status, error=scored.error,
                           exit_code=ended.exit_code, started_at=ended.started_at, ended_at=ended.ended_at,
                           host=ended.host, **where)


def lost_record(lost: HarnessExit, *, rerun: str, **where: Any) -> ExecutionRecord:
    """The record of an execution whose harness node was lost: an infrastructure failure that
    runs again as ``rerun``."""
    return ExecutionRecord(execution=lost.assignment.execution, task=lost.assignment.task["id"], reward=None,
                           status="infra_failure", error=f"harness node {lost.lost_on} was lost", exit_code=None,
                           started_at=lost.started_at, ended_at=lost.ended_at, host=lost.lost_on, rerun=rerun,
                           **where)
