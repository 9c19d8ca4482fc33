"""Paths dedup (the reference system's data-dedup objective): per execution, sample up to
``j_max`` root-to-leaf paths, role by role in priority order (main agent first), each role's
paths drawn without replacement with probability proportional to their trainable tokens. The
union of the chosen paths is trained with every token once (a shared prefix is not counted per
path); the loss is the mean over the union's trainable tokens within an execution, then the mean
over executions: ``w_i = trainable_i * [i in union_e] / (|union_e trainable| * E)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gyrectl.capture.tree import ROLES, TokenTree
from gyrectl.dedup.exact import path_trainable_counts
from gyrectl.dedup.weighted import WeightedTree


def sample_paths(tree: TokenTree, *, j_max: int, rng: np.random.Generator,
                 role_priority: Sequence[str] = ROLES) -> np.ndarray:
    """Leaf segments of the chosen paths."""
    counts = path_trainable_counts(tree)
    leaves = tree.leaves
    leaves = leaves[counts[leaves] > 0]
    roles = np.array(tree.role_of_segments(), dtype=object)[leaves]
    chosen: list[np.ndarray] = []
    left = j_max
    for role in role_priority:
        pool = leaves[roles == role]
        take = min(left, len(pool))
        if take:
            weights = counts[pool] / counts[pool].sum()
            chosen.append(rng.choice(pool, size=take, replace=False, p=weights))
            left -= take
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)


def union_of_paths(tree: TokenTree, leaves: np.ndarray) -> np.ndarray:
    """bool per token: on at least one of the paths ending at ``leaves``."""
    keep = np.zeros(len(tree.seg_start), dtype=bool)
    for segment in leaves.tolist():
        while segment >= 0 and not keep[segment]:
            keep[segment] = True
            segment = tree.seg_parent[segment]
    return keep[tree.segment]


def paths_dedup(trees: Sequence[TokenTree], *, j_max: int, seed: int = 0,
                role_priority: Sequence[str] = ROLES) -> list[WeightedTree]:
    rng = np.random.default_rng(seed)
    unions = [union_of_paths(tree, sample_paths(tree, j_max=j_max, rng=rng, role_priority=role_priority))
              for tree in trees]
    trained = [int(np.count_nonzero(tree.trainable & keep)) for tree, keep in zip(trees, unions, strict=True)]
    num_executions = sum(1 for n in trained if n)
    out = []
    for tree, keep, n in zip(trees, unions, trained, strict=True):
        scale = 1.0 / (n * num_executions) if n else 0.0
        out.append(WeightedTree.of(tree, (tree.trainable & keep) * scale).restrict(keep))
    return out
