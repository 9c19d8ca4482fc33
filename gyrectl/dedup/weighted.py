"""A token tree with per-token loss weights: what both dedup modes produce and packing consumes.

``loss = -sum_i loss_weight[i] * logprob(token_i | ancestors of i)``, each token predicted from
the logits at ``parent[i]``. Weights are already normalised over the whole batch, so summing the
loss over micro-batches (and over data-parallel ranks) gives the step's loss: no trainer-side
division that could disagree with the dedup mode.

Exact dedup also keeps each root-to-leaf path's own per-token weight ``c_p`` at the path's last
token (``path_weight``; ``loss_weight[i] = trainable_i * sum_{p through i} c_p``): a loss whose
terms differ per path, not only per token (GSPO's sequence ratio), rebuilds its sums from it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gyrectl.capture.tree import TokenTree


@dataclass(frozen=True)
class WeightedTree:
    execution: str
    tokens: np.ndarray
    """int32 token ids, DFS order (every subtree contiguous)."""
    parent: np.ndarray
    """int64 index of the token whose logits predict this one (-1 at a root)."""
    depth: np.ndarray
    """int64 position id."""
    subtree_end: np.ndarray
    """int64 end of the token's subtree range."""
    loss_weight: np.ndarray
    """float64 weight of the token's log-likelihood in the step's loss (0: context only)."""
    logprob: np.ndarray
    """float32 behaviour logprob (NaN where unknown)."""
    weight_version: np.ndarray
    """int64 weight version that sampled the token (-1: not sampled / unknown)."""
    trainable: np.ndarray
    """bool: some call sampled the token (it counts in ``|T_p|`` of every path through it)."""
    path_weight: np.ndarray
    """float64 ``c_p`` at the last token of each root-to-leaf path p, 0 elsewhere: the weight each of
    p's trainable tokens has in naive per-path training (0 everywhere in paths mode, which trains a
    union, not paths)."""

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def num_trained(self) -> int:
        return int(np.count_nonzero(self.loss_weight))

    @classmethod
    def of(cls, tree: TokenTree, loss_weight: np.ndarray, path_weight: np.ndarray | None = None) -> WeightedTree:
        return cls(execution=tree.execution, tokens=tree.tokens, parent=tree.parent, depth=tree.depth,
                   subtree_end=tree.subtree_end, loss_weight=loss_weight, logprob=tree.logprob,
                   weight_version=tree.weight_version, trainable=tree.trainable,
                   path_weight=np.zeros(tree.num_tokens) if path_weight is None else path_weight)

    def restrict(self, keep: np.ndarray) -> WeightedTree:
        """The sub-forest of the tokens in ``keep`` (a bool mask or sorted indices that holds
        every kept token's ancestors); DFS order, parents and subtree ranges re-indexed."""
        index = np.flatnonzero(keep) if keep.dtype == bool else keep
        parent = self.parent[index]
        return replace(
            self, tokens=self.tokens[index], depth=self.depth[index], loss_weight=self.loss_weight[index],
            logprob=self.logprob[index], weight_version=self.weight_version[index],
            trainable=self.trainable[index], path_weight=self.path_weight[index],
            parent=np.where(parent >= 0, np.searchsorted(index, parent), -1),
            subtree_end=np.searchsorted(index, self.subtree_end[index]))
