"""Evaluation: held-out tasks run with the run's weights, recorded apart from the training data
and never trained on.

    a server serves weights vN (a reload, a wake, a new server) and vN is due:
        v0 (``eval.at_start``: the baseline), a multiple of ``eval.every_steps``, or the run's
        last version (``eval.at_end``: the head ends only once it was evaluated)
        -> eval N: executions_per_task executions of each eval task, ids ``eval-vN-IIII``, through
           the same gateway, harness and verifier, each pinned to servers serving vN or newer
           and sampled at ``eval.temperature`` (the gateway sets it on every call)
    an eval execution ends -> scored, one line in ``trajectories/eval-executions.jsonl``
    the last one of eval N ends -> one line in ``evals.jsonl``: infrastructure failures, reward
        mean, pass@1, pass@k

Eval executions run beside the training ones (they are dispatched as soon as they are due, so no
policy decision can starve them), and are never in the pool a training step claims from. An eval
still running when the run stops is lost (its summary line is never written).

An execution that never ran (an infrastructure failure: no output, the harness gave up) says
nothing about the weights, so it is counted apart and a task with one is left out of pass@1 and
pass@k: a pass rate over tasks whose executions all ran, beside how many did not.
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
    """Versions that are a multiple of this are due (0: none of them)."""
    executions_per_task: int
    pass_threshold: float
    temperature: float | None = None
    at_start: bool = False
    """v0, the starting weights, is due: the baseline every later evaluation compares with."""
    final_version: int | None = None
    """The run's last weights version (``run.steps``), due whatever ``every_steps`` says; None: not."""

    def due(self, version: int) -> bool:
        if version == 0:
            return self.at_start
        return version == self.final_version or (self.every_steps > 0 and version % self.every_steps == 0)

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
    """One eval's line of ``evals.jsonl`` from its executions' records (``task``, ``reward``).

    An infrastructure failure (reward None) never ran, so it is counted in ``infra_failures`` and
    nowhere else: the reward mean is over the executions that ran, and pass@1 (the mean share of a
    task's executions that passed) and pass@k (the share of tasks with at least one pass among its
    k) are over the tasks whose executions all ran (None when none did), since counting a failure
    as "not passed" would score the infrastructure, and leaving out only the failure would score
    such a task on fewer than k tries. ``step`` is the step that made the weights (-1: the
    starting weights)."""
    by_task: dict[str, list[float | None]] = {}
    for record in records:
        by_task.setdefault(record["task"], []).append(record["reward"])
    rewards = [r for rs in by_task.values() for r in rs if r is not None]
    passed = [[r >= pass_threshold for r in rs] for rs in by_task.values() if None not in rs]
    return {"step": version - 1, "weight_version": version, "tasks": len(by_task), "executions": len(records),
            "infra_failures": len(records) - len(rewards),
            "reward_mean": round(sum(rewards) / len(rewards), 6) if rewards else None,
            "pass_at_1": round(sum(sum(p) / len(p) for p in passed) / len(passed), 6) if passed else None,
            "pass_at_k": round(sum(any(p) for p in passed) / len(passed), 6) if passed else None,
            "k": k}
