"""The rows ``gyrectl status`` shows straight from the run directory's files and from Slurm: the
node table, the rollout servers' load, the trainer's finished steps.

The renderer reads their typed fields. A file row's ``--json`` is the file's record as written
(extra keys included: a trainer's or a newer head's own fields reach scripts unchanged), so each
keeps it beside the fields it types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class _FileRow:
    record: dict[str, Any] = field(repr=False)
    """The line as the file holds it."""

    def to_json(self) -> dict[str, Any]:
        return self.record


@dataclass(frozen=True)
class NodeRow(_FileRow):
    """A line of ``nodes.json``."""

    name: str
    het_group: int
    gpus: int
    cpus: int
    address: str | None
    role: str

    @classmethod
    def of(cls, record: dict[str, Any]) -> NodeRow:
        return cls(name=record["name"], het_group=record["het_group"], gpus=record["gpus"], cpus=record["cpus"],
                   address=record.get("address"), role=record["role"], record=record)


@dataclass(frozen=True)
class ServerRow(_FileRow):
    """A rollout server replica in ``servers.json``; ``running``/``waiting`` are the engine's
    queues (None while its metrics cannot be read); ``cell`` and ``node`` say where it runs, and
    ``calls`` how many calls it has taken (None in files of heads from before replicas)."""

    name: str
    state: str
    gateway_calls: int
    running: int | None
    waiting: int | None
    weight_version: int | None
    cell: int | None = None
    node: str | None = None
    calls: int | None = None

    @classmethod
    def of(cls, record: dict[str, Any]) -> ServerRow:
        return cls(name=record["name"], state=record["state"], gateway_calls=record["gateway_calls"],
                   running=record.get("running"), waiting=record.get("waiting"),
                   weight_version=record.get("weight_version"), cell=record.get("cell"), node=record.get("node"),
                   calls=record.get("calls"), record=record)


@dataclass(frozen=True)
class StepRow(_FileRow):
    """A finished training step: a ``metrics.jsonl`` line with the fields of
    :data:`gyrectl.run.files.STEP_METRICS`; ``groups`` and ``groups_without_signal`` are None in
    lines of trainers from before they were counted."""

    step: int
    reward_mean: float
    executions: int
    naive_tokens: int
    trained_tokens: int
    weight_version: int
    duration_s: float
    groups: int | None = None
    groups_without_signal: int | None = None

    @property
    def without_signal(self) -> bool:
        """Every group of the step had a uniform reward: it trained on zero advantages only."""
        return self.groups_without_signal is not None and self.groups_without_signal == self.groups

    @classmethod
    def of(cls, record: dict[str, Any]) -> StepRow:
        return cls(step=record["step"], reward_mean=record["reward_mean"], executions=record["executions"],
                   naive_tokens=record["naive_tokens"], trained_tokens=record["trained_tokens"],
                   weight_version=record["weight_version"], duration_s=record["duration_s"],
                   groups=_optional_int(record.get("groups")),
                   groups_without_signal=_optional_int(record.get("groups_without_signal")), record=record)


def _optional_int(value: Any) -> int | None:
    """A field a damaged or older line may lack or garble: shown as unknown, not as an error."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class EvalRow(_FileRow):
    """A finished evaluation: an ``evals.jsonl`` line with the fields of
    :data:`gyrectl.run.files.EVAL_SUMMARY`; ``infra_failures`` is None in lines of heads from
    before evaluations counted them."""

    weight_version: int
    executions: int
    reward_mean: float | None
    pass_at_1: float | None
    pass_at_k: float | None
    k: int
    infra_failures: int | None = None

    @classmethod
    def of(cls, record: dict[str, Any]) -> EvalRow:
        failures = record.get("infra_failures")
        return cls(weight_version=record["weight_version"], executions=record["executions"],
                   reward_mean=record["reward_mean"], pass_at_1=record["pass_at_1"], pass_at_k=record["pass_at_k"],
                   k=record["k"], infra_failures=failures if type(failures) is int else None, record=record)
