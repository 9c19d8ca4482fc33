"""Packs weighted token trees into micro-batches of at most ``budget`` tokens.

A micro-batch is one packed sequence: trees (or pieces of trees) back to back, each token with
its position id (depth on its own path), the index of its parent (whose logits predict it) and
the end of its subtree range -- the whole attention mask, since with DFS order a token sees
exactly the keys ``kv <= q < subtree_end[kv]`` (its ancestors and itself). Nothing O(L^2) is
stored; the trainer builds the mask the attention kernel wants from the ranges
(``train/mask.py``) and the tensors from the arrays (``train/packed.py``).

A tree larger than the budget is split along branches with prefix recomputation: a piece is a
contiguous DFS range ending at a leaf, preceded by the ancestors of its first token. Those
ancestors are recomputed as context with loss weight 0 (the piece that owns them trains them),
so the loss and its gradient stay exact; every path ending in a piece lies whole in it, which a
per-path loss (GSPO's sequence ratio) relies on. A single root-to-leaf path longer than the budget
cannot be split this way; it becomes a micro-batch of its own, flagged ``over_budget``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gyrectl.dedup.weighted import WeightedTree


@dataclass(frozen=True)
class PackedMicroBatch:
    """One packed sequence as plain per-token arrays (the trainer's ``packed_tensors`` in
    ``train/packed.py`` turns them into the tensors of a forward pass)."""

    input_ids: np.ndarray
    """int64 [L] token ids."""
    position_ids: np.ndarray
    """int64 [L] depth of each token on its own path."""
    parent_index: np.ndarray
    """int64 [L] packed index whose logits predict the token (-1: a root, never a target)."""
    subtree_end: np.ndarray
    """int64 [L] token i is seen by queries ``i <= q < subtree_end[i]`` (the tree mask)."""
    loss_weight: np.ndarray
    """float32 [L] weight of the token's log-likelihood in the step's loss."""
    behaviour_logprob: np.ndarray
    """float32 [L] logprob under the policy that sampled the token (NaN: not sampled)."""
    weight_version: np.ndarray
    """int64 [L] weight version that sampled the token (-1: not sampled / unknown)."""
    execution_index: np.ndarray
    """int64 [L] index into ``executions`` (for per-execution advantages)."""
    trainable: np.ndarray
    """bool [L] sampled by some call: counts in its paths' ``|T_p|``, recomputed context included."""
    path_weight: np.ndarray
    """float32 [L] ``c_p`` at the last token of each root-to-leaf path (``WeightedTree.path_weight``):
    every path ending in a micro-batch lies whole in it (its prefix recomputed as context)."""
    executions: tuple[str, ...]
    over_budget: bool
    """A root-to-leaf path longer than the budget forced this micro-batch past it."""

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)


def split_to_budget(tree: WeightedTree, budget: int) -> list[WeightedTree]:
    """Pieces of ``tree`` of at most ``budget`` tokens each (see the module docstring)."""
    if tree.num_tokens <= budget:
        return [tree]
    leaves = np.flatnonzero(tree.subtree_end == np.arange(1, tree.num_tokens + 1))
    pieces, first = [], 0
    while first < tree.num_tokens:
        # depth == number of ancestors: the recomputed prefix the piece starting at `first` needs.
        room = first + budget - int(tree.depth[first])
        last = leaves[max(np.searchsorted(leaves, room, side="left") - 1, np.searchsorted(leaves, first))]
        ancestors = np.flatnonzero(tree.subtree_end[:first] > first)
        piece = tree.restrict(np.concatenate([ancestors, np.arange(first, last + 1)]))
        weight = piece.loss_weight.copy()
        weight[:len(ancestors)] = 0.0
        pieces.append(replace(piece, loss_weight=weight))
        first = int(last) + 1
    return pieces


def pack(trees: Sequence[WeightedTree], *, budget: int) -> list[PackedMicroBatch]:
    """Greedy, order-keeping packing of whole trees or their pieces into micro-batches."""
    batches: list[PackedMicroBatch] = []
    current: list[WeightedTree] = []
    for tree in trees:
        for piece in split_to_budget(tree, budget):
            if current and sum(p.num_tokens for p in current) + piece.num_tokens > budget:
                batches.append(_concatenate(current, budget))
                current = []
            current.append(piece)
    if current:
        batches.append(_concatenate(current, budget))
    return batches


def _concatenate(pieces: Sequence[WeightedTree], budget: int) -> PackedMicroBatch:
    base = np.cumsum([0] + [p.num_tokens for p in pieces[:-1]])
    executions = tuple(dict.fromkeys(p.execution for p in pieces))
    return PackedMicroBatch(
        input_ids=np.concatenate([p.tokens for p in pieces]).astype(np.int64),
        position_ids=np.concatenate([p.depth for p in pieces]).astype(np.int64),
        parent_index=np.concatenate([np.where(p.parent >= 0, p.parent + b, -1)
                                     for p, b in zip(pieces, base, strict=True)]),
        subtree_end=np.concatenate([p.subtree_end + b for p, b in zip(pieces, base, strict=True)]),
        loss_weight=np.concatenate([p.loss_weight for p in pieces]).astype(np.float32),
        behaviour_logprob=np.concatenate([p.logprob for p in pieces]).astype(np.float32),
        weight_version=np.concatenate([p.weight_version for p in pieces]).astype(np.int64),
        execution_index=np.concatenate([np.full(p.num_tokens, executions.index(p.execution)) for p in pieces]),
        trainable=np.concatenate([p.trainable for p in pieces]).astype(bool),
        path_weight=np.concatenate([p.path_weight for p in pieces]).astype(np.float32),
        executions=executions, over_budget=sum(p.num_tokens for p in pieces) > budget)
