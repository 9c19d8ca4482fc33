"""What ``gyrectl replay`` shows: per-execution trees and dedup statistics as typed records.

Counts (the ``replay --json`` contract; extend, never rename):

* ``naive_tokens`` -- sum over calls of prompt + completion length (what per-call training
  processes);
* ``unique_tokens`` -- nodes of the execution's token trie (computed once by exact dedup);
* ``trained_tokens_exact`` -- unique tokens that carry a loss in exact mode (sampled by the
  policy);
* ``computed_tokens_paths`` / ``trained_tokens_paths`` -- the same for paths mode (the union of
  the sampled paths);
* ``paths`` -- root-to-leaf paths; ``weight_versions`` -- versions that sampled its tokens.

Beside the counts, ``skipped`` lists every span of the source that could not be read (``file``,
``offset``, ``bytes``, ``line``, ``reason``) and ``unrecoverable_calls`` counts, per execution,
intact calls stored as an edit of a call lost to damage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from gyrectl.capture.source import ExecutionInfo, Recorded
from gyrectl.capture.tree import TokenTree, build_tree
from gyrectl.dedup.paths import paths_dedup
from gyrectl.errors import UserError
from gyrectl.store.damage import Skipped


@dataclass(frozen=True)
class DedupCounts:
    executions: int = 0
    calls: int = 0
    naive_tokens: int = 0
    unique_tokens: int = 0
    trained_tokens_exact: int = 0
    computed_tokens_paths: int = 0
    trained_tokens_paths: int = 0
    paths: int = 0

    @property
    def dedup_ratio(self) -> float:
        return self.naive_tokens / self.unique_tokens if self.unique_tokens else 0.0

    def __add__(self, other: DedupCounts) -> DedupCounts:
        return DedupCounts(*(a + b for a, b in zip(asdict(self).values(), asdict(other).values(), strict=True)))

    def to_json(self) -> dict:
        return {**asdict(self), "dedup_ratio": round(self.dedup_ratio, 4)}


@dataclass(frozen=True)
class ExecutionReport:
    execution: str
    info: ExecutionInfo
    counts: DedupCounts
    weight_versions: tuple[int, ...]
    tree: TokenTree = field(repr=False)

    def to_json(self) -> dict:
        return {"execution": self.execution, "step": self.info.step, "reward": self.info.reward,
                **self.counts.to_json(), "weight_versions": list(self.weight_versions)}


@dataclass(frozen=True)
class ReplayReport:
    executions: tuple[ExecutionReport, ...]
    skipped: tuple[Skipped, ...] = ()
    """What the source held that could not be read."""
    unrecoverable: dict[str, int] = field(default_factory=dict)
    """Per selected execution (shown, or left with no call to show), intact calls that were
    edits of a call lost to damage."""

    @property
    def totals(self) -> DedupCounts:
        return sum((e.counts for e in self.executions), DedupCounts())

    def by_step(self) -> dict[int | None, DedupCounts]:
        out: dict[int | None, DedupCounts] = {}
        for e in self.executions:
            out[e.info.step] = out.get(e.info.step, DedupCounts()) + e.counts
        return out

    def to_json(self) -> dict:
        return {"totals": self.totals.to_json(),
                "steps": [{"step": step, **counts.to_json()} for step, counts in self.by_step().items()],
                "executions": [e.to_json() for e in self.executions],
                "skipped": [s.to_json() for s in self.skipped], "unrecoverable_calls": self.unrecoverable}


def replay_report(recorded: Recorded, *, step: int | None = None, execution: str | None = None,
                  j_max: int = 4, seed: int = 0) -> ReplayReport:
    def wanted(e: str) -> bool:
        return (execution is None or e == execution) and \
            (step is None or recorded.info.get(e, ExecutionInfo()).step == step)

    chosen = [e for e in recorded.calls if wanted(e)]
    if execution is not None and not chosen:
        raise UserError(f"no execution {execution!r} (known: {', '.join(list(recorded.calls)[:10])})")
    if step is not None and not chosen:
        steps = sorted({i.step for i in recorded.info.values() if i.step is not None})
        raise UserError(f"no execution recorded for step {step} (steps with data: {steps or 'none'})")
    trees = [build_tree(e, recorded.calls[e]) for e in chosen]
    sampled = paths_dedup(trees, j_max=j_max, seed=seed)
    return ReplayReport(tuple(
        ExecutionReport(execution=tree.execution, info=recorded.info.get(tree.execution, ExecutionInfo()),
                        counts=_counts(tree, paths), tree=tree,
                        weight_versions=tuple(int(v) for v in np.unique(tree.weight_version) if v >= 0))
        for tree, paths in zip(trees, sampled, strict=True)), skipped=tuple(recorded.skipped),
        unrecoverable={e: n for e, n in recorded.unrecoverable.items() if wanted(e)})


def _counts(tree: TokenTree, paths) -> DedupCounts:
    return DedupCounts(
        executions=1, calls=len(tree.calls), naive_tokens=tree.num_naive_tokens, unique_tokens=tree.num_tokens,
        trained_tokens_exact=int(tree.trainable.sum()), computed_tokens_paths=paths.num_tokens,
        trained_tokens_paths=paths.num_trained, paths=len(tree.leaves))
