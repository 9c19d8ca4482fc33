"""``batches/step-NNNNNN.json``: the executions training step N trains on, written by the head when
the step claims them (:mod:`gyrectl.rollout.claims`) and read by the trainer
(:mod:`gyrectl.train.batch`)::

    {"step": N, "weights_version": N,
     "executions": [{"execution": "e000012", "task": "t3", "reward": 0.25, "weight_version": 0,
                     "group": 3}, ...],
     "left_out": ["e000013", ...]}

``executions`` lists only executions that ended ``ok`` or ``timed_out``; ``left_out`` names the
infrastructure failures the step claimed but does not train (older files may lack it). A batch is
whole GRPO groups; ``group`` numbers an execution's group (``seq // rollout.executions_per_task``),
so two groups of one task in a batch keep their own baselines (older files lack it: their
executions are grouped by ``task``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir


@dataclass(frozen=True)
class BatchEntry:
    execution: str
    task: str
    reward: float
    weight_version: int | None
    group: int | None = None

    @property
    def group_key(self) -> str:
        """What its advantage baseline is shared by: its group, or (older files) its task."""
        return f"group {self.group}" if self.group is not None else f"task {self.task}"

    def to_json(self) -> dict[str, Any]:
        line = {"execution": self.execution, "task": self.task, "reward": self.reward,
                "weight_version": self.weight_version}
        return line if self.group is None else line | {"group": self.group}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BatchEntry:
        version, group = obj.get("weight_version"), obj.get("group")
        return cls(execution=str(obj["execution"]), task=str(obj["task"]), reward=float(obj["reward"]),
                   weight_version=None if version is None else int(version),
                   group=None if group is None else int(group))


@dataclass(frozen=True)
class BatchFile:
    step: int
    weights_version: int
    entries: tuple[BatchEntry, ...]
    left_out: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "weights_version": self.weights_version,
                "executions": [entry.to_json() for entry in self.entries], "left_out": list(self.left_out)}


def write_batch_file(run: RunDir, batch: BatchFile) -> None:
    run.write_json(run.batch_file(batch.step), batch.to_json())


def read_batch_file(*, run: RunDir, step: int) -> BatchFile:
    path = run.batch_file(step)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no batch file for step {step} (the coordinator writes it when it "
                        "claims the step)") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg})") from None
    try:
        batch = BatchFile(step=int(raw["step"]), weights_version=int(raw["weights_version"]),
                          entries=tuple(BatchEntry.from_json(e) for e in raw["executions"]),
                          left_out=tuple(str(e) for e in raw.get("left_out", ())))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"{path}: expected {{'step', 'weights_version', 'executions': [{{'execution', "
                        f"'task', 'reward'}}, ...]}} ({type(exc).__name__}: {exc})") from None
    if batch.step != step:
        raise UserError(f"{path}: says step {batch.step}, expected {step}")
    return batch
