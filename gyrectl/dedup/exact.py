"""Exact dedup: every unique token computed once, with loss weights that make the loss and its
gradient equal to training on every root-to-leaf path separately.

Naive per-path training's loss is ``sum_p c_p sum_{t in T_p} term_t``: each path p (a *sequence*)
gives each of its ``|T_p|`` trainable tokens the same weight ``c_p`` (all trainable tokens of the
execution count, whichever call sampled them). A token i lies on the ``n_i`` paths through its
segment, and its term is the same number on each of them (it depends on the token and its prefix
only), so the tree's weight is the sum over those paths: ``w_i = trainable_i * sum_{p through i} c_p``,
one reverse-DFS pass over segments. With ``P`` the batch's paths that hold a trainable token and
``E`` the executions that hold one, ``c_p`` is per normalisation:

* ``token`` (= ``training.loss_aggregation: token_mean``) -- the mean over every (path, trainable
  token) pair of the batch: ``c_p = 1 / sum_q |T_q|``, so ``w_i = trainable_i * n_i / sum_q |T_q|``
  (the *naive* count, not the unique one);
* ``seq_mean_token_mean`` -- each path's token mean, then the mean over paths: ``1 / (|T_p| P)``;
* ``seq_mean_token_sum`` -- each path's token sum, then the mean over paths: ``1 / P``;
* ``constant`` -- each path's token sum over a fixed ``loss_constant`` C, then the mean over paths
  (Dr. GRPO): ``1 / (C P)``;
* ``path`` -- each path's mean, averaged over the execution's paths (``P_e``), then over
  executions: ``1 / (|T_p| P_e E)``.

Paths without a trainable token add nothing and are not counted in ``P`` / ``P_e``; executions
without one are not counted in ``E``. Each tree keeps ``c_p`` at its paths' last tokens
(``WeightedTree.path_weight``) for losses whose terms differ per path (GSPO's sequence ratio).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from gyrectl.capture.tree import TokenTree
from gyrectl.dedup.weighted import WeightedTree

LossAggregation = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant"]
LOSS_AGGREGATIONS: tuple[LossAggregation, ...] = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum",
                                                  "constant")
"""The values of ``training.loss_aggregation``."""
Normalisation = Literal["token", "path"] | LossAggregation


def path_trainable_counts(tree: TokenTree) -> np.ndarray:
    """``|T_p|`` for every segment (meaningful at leaves): trainable tokens from the root down."""
    return tree.path_totals(tree.segment_sums(tree.trainable.astype(np.int64)))


def trained_leaves(tree: TokenTree) -> tuple[np.ndarray, np.ndarray]:
    """The leaf segments whose paths hold a trainable token, and those paths' ``|T_p|``."""
    counts = path_trainable_counts(tree)
    leaves = tree.leaves
    trained = leaves[counts[leaves] > 0]
    return trained, counts[trained]


def path_token_weights(counts: np.ndarray, aggregation: LossAggregation,
                       loss_constant: float | None = None) -> np.ndarray:
    """``c_p`` for every path of the batch that holds a trainable token, ``counts`` their ``|T_p|``
    (the module docstring)."""
    num_paths = len(counts)
    if not num_paths:
        return np.zeros(0)
    if aggregation == "token_mean":
        return np.full(num_paths, 1.0 / float(counts.sum()))
    if aggregation == "seq_mean_token_mean":
        return 1.0 / (counts * num_paths)
    if aggregation == "seq_mean_token_sum":
        return np.full(num_paths, 1.0 / num_paths)
    if aggregation == "constant":
        if loss_constant is None or loss_constant <= 0:
            raise ValueError(f"the constant aggregation needs a positive loss_constant, got {loss_constant}")
        return np.full(num_paths, 1.0 / (loss_constant * num_paths))
    raise ValueError(f"unknown loss aggregation {aggregation!r}; one of {LOSS_AGGREGATIONS}")


def exact_dedup(trees: Sequence[TokenTree], *, normalisation: Normalisation = "token",
                loss_constant: float | None = None) -> list[WeightedTree]:
    """Weighted trees for ``normalisation`` (``loss_constant`` is ``constant``'s divisor)."""
    if normalisation in ("token", "token_mean"):
        return _token_mean(trees)
    if normalisation == "path":
        return _path_mean(trees)
    return _per_path(trees, normalisation, loss_constant)


def _path_weight_at_ends(tree: TokenTree, leaves: np.ndarray, weight: np.ndarray | float) -> np.ndarray:
    out = np.zeros(tree.num_tokens)
    out[tree.seg_end[leaves] - 1] = weight
    return out


def _token_mean(trees: Sequence[TokenTree]) -> list[WeightedTree]:
    # n_i x (1 / N), not a sum of n_i copies of 1 / N: the default's weights keep their exact bits.
    naive_trainable = sum(float(tree.seg_num_leaves[tree.segment] @ tree.trainable) for tree in trees)
    scale = 1.0 / naive_trainable if naive_trainable else 0.0
    return [WeightedTree.of(tree, tree.trainable * tree.seg_num_leaves[tree.segment] * scale,
                            _path_weight_at_ends(tree, trained_leaves(tree)[0], scale)) for tree in trees]


def _path_mean(trees: Sequence[TokenTree]) -> list[WeightedTree]:
    per_path: list[tuple[TokenTree, np.ndarray, np.ndarray, np.ndarray]] = []
    for tree in trees:
        leaf_value = np.zeros(len(tree.seg_start))
        trained, counts = trained_leaves(tree)
        leaf_value[trained] = 1.0 / counts
        per_path.append((tree, tree.subtree_sums(leaf_value), trained, counts))
    num_executions = sum(1 for _, _, trained, _ in per_path if len(trained))
    out = []
    for tree, through, trained, counts in per_path:
        scale = 1.0 / (len(trained) * num_executions) if len(trained) else 0.0
        out.append(WeightedTree.of(tree, tree.trainable * through[tree.segment] * scale,
                                   _path_weight_at_ends(tree, trained, scale / counts)))
    return out


def _per_path(trees: Sequence[TokenTree], aggregation: LossAggregation,
              loss_constant: float | None) -> list[WeightedTree]:
    """``w_i = trainable_i * sum_{p through i} c_p`` with ``c_p`` from :func:`path_token_weights`."""
    leaves = [trained_leaves(tree) for tree in trees]
    counts = np.concatenate([c for _, c in leaves]) if leaves else np.zeros(0)
    weights = np.split(path_token_weights(counts, aggregation, loss_constant),
                       np.cumsum([len(c) for _, c in leaves])[:-1])
    out = []
    for tree, (trained, _), c in zip(trees, leaves, weights, strict=True):
        leaf_value = np.zeros(len(tree.seg_start))
        leaf_value[trained] = c
        out.append(WeightedTree.of(tree, tree.trainable * tree.subtree_sums(leaf_value)[tree.segment],
                                   _path_weight_at_ends(tree, trained, c)))
    return out
