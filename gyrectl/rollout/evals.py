"""Evaluation: held-out tasks run with the newest weights every few steps, recorded apart from
the training data and never trained on.

    a server serves weights vN (a reload, a wake, a new server) and N % every_steps == 0
        -> eval N: executions_per_task executions of each eval task, ids ``eval-vN-IIII``, through
           the same gateway, harness and verifier, each pinned to servers serving vN or newer
           and sampled at ``eval.temperature`` (the gateway sets it on every call)
    an eval execution ends -> scored, one line in ``trajectories/eval-executions.jsonl``
    the last one of eval N ends -> one line in ``evals.jsonl``: reward mean, pass@1, pass@k

Eval executions run beside the training ones (they are dispatched as soon as they are due, so no
policy decision can starve them), and are never in the pool a training step claims from. An eval
still running when the run stops is lost (its summary line is never written).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gyrectl.rollout.tasks import Assignment

PREFIX = "eval-v"


@dataclass(frozen=True)
class EvalPlan:
    tasks: tuple[dict[str, Any], ...]
    every_steps: int
    executions_per_task: int
    pass_threshold: float
    temperature: float | None = None

    def due(self, version: int) -> bool:
        return self.every_steps > 0 and version > 0 and version % self.every_steps == 0

    def assignments(self, version: int) -> list[Assignment]:
        """Eval ``version``'s executions: each task ``executions_per_task`` times, in task order."""
        k = self.executions_per_task
        return [Assignment(execution=f"{PREFIX}{version}-{i:04d}", seq=i, task=self.tasks[i // k])
                for i in range(len(self.tasks) * k)]


def eval_version(execution: str) -> int | None:
    """The weights version an execution evaluates; None for a training execution."""
    if not execution.startswith(PREFIX):
        return None
    return int(execution[len(PREFIX):].split("-", 1)[0])


def summary(records: Sequence[dict[str, Any]], *, version: int, k: int, pass_threshold: float) -> dict[str, Any]:
    """One eval's line of ``evals.jsonl`` from its executions' records (``task``, ``reward``;
    an infrastructure failure, reward None, counts as not passed and is left out of the mean).
    pass@1: the mean share of a task's executions that passed; pass@k: the share of tasks with at
    least one pass among its k."""
    by_task: dict[str, list[float | None]] = {}
    for record in records:
        by_task.setdefault(record["task"], []).append(record["reward"])
    rewards = [r for rs in by_task.values() for r in rs if r is not None]
    passed = {task: [r is not None and r >= pass_threshold for r in rs] for task, rs in by_task.items()}
    return {"step": version - 1, "weight_version": version, "tasks": len(by_task), "executions": len(records),
            "reward_mean": round(sum(rewards) / len(rewards), 6) if rewards else None,
            "pass_at_1": round(sum(sum(p) / len(p) for p in passed.values()) / len(passed), 6) if passed else None,
            "pass_at_k": round(sum(any(p) for p in passed.values()) / len(passed), 6) if passed else None,
            "k": k}
