"""Exact dedup: every unique token computed once, with loss weights that make the loss and its
gradient equal to training on every root-to-leaf path separately.

A token i lies on the ``n_i`` paths through its segment. With ``|T_p|`` the trainable tokens on
path p (all trainable tokens of the execution count, whichever call sampled them):

* ``token`` normalisation -- the mean over every (path, trainable token) pair of the batch, as
  naive per-path training with a global token mean computes it:
  ``w_i = trainable_i * n_i / sum_p |T_p|`` (the *naive* count, not the unique one);
* ``path`` normalisation -- each path's mean NLL, averaged over the execution's paths, then over
  executions: ``w_i = trainable_i * sum_{p through i} (1/|T_p|) / (P_e * E)``.

Paths without a trainable token add nothing and are not counted in ``P_e``; executions without
one are not counted in ``E``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from gyrectl.capture.tree import TokenTree
from gyrectl.dedup.weighted import WeightedTree

Normalisation = Literal["token", "path"]


def path_trainable_counts(tree: TokenTree) -> np.ndarray:
    """``|T_p|`` for every segment (meaningful at leaves): trainable tokens from the root down."""
    return tree.path_totals(tree.segment_sums(tree.trainable.astype(np.int64)))


def exact_dedup(trees: Sequence[TokenTree], *, normalisation: Normalisation = "token") -> list[WeightedTree]:
    if normalisation == "token":
        return _token_mean(trees)
    return _path_mean(trees)


def _token_mean(trees: Sequence[TokenTree]) -> list[WeightedTree]:
    naive_trainable = sum(float(tree.seg_num_leaves[tree.segment] @ tree.trainable) for tree in trees)
    scale = 1.0 / naive_trainable if naive_trainable else 0.0
    return [WeightedTree.of(tree, tree.trainable * tree.seg_num_leaves[tree.segment] * scale) for tree in trees]


def _path_mean(trees: Sequence[TokenTree]) -> list[WeightedTree]:
    per_path: list[tuple[TokenTree, np.ndarray, int]] = []
    for tree in trees:
        leaf_value = np.zeros(len(tree.seg_start))
        counts = path_trainable_counts(tree)
        leaves = tree.leaves
        trained = leaves[counts[leaves] > 0]
        leaf_value[trained] = 1.0 / counts[trained]
        per_path.append((tree, tree.subtree_sums(leaf_value), len(trained)))
    num_executions = sum(1 for _, _, num_paths in per_path if num_paths)
    out = []
    for tree, through, num_paths in per_path:
        scale = 1.0 / (num_paths * num_executions) if num_paths else 0.0
        out.append(WeightedTree.of(tree, tree.trainable * through[tree.segment] * scale))
    return out
