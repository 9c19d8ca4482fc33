"""The tree attention mask, built from subtree ranges for the kernel in use.

Query q may see key kv iff ``kv <= q < subtree_end[kv]`` (kv is q or one of its ancestors).

* GPU: FlexAttention with a ``BlockMask`` from ``create_block_mask`` -- blocks wholly outside
  every subtree are skipped, nothing O(L^2) is materialised.
* CPU: FlexAttention has no backward there, so training uses sdpa with a dense 4D mask, built
  per micro-batch (the budget bounds L) and dropped after the step; ``eager`` needs an additive
  float mask (a bool mask is silently added to the scores, which is wrong).
"""

from __future__ import annotations

from typing import Any

import torch


def dense_tree_mask(subtree_end: torch.Tensor, *, attn_implementation: str = "sdpa") -> torch.Tensor:
    """[1, 1, L, L] mask: bool (True = attend) for sdpa, additive float for eager."""
    positions = torch.arange(len(subtree_end), device=subtree_end.device)
    q, kv = positions[:, None], positions[None, :]
    allowed = (kv <= q) & (q < subtree_end[None, :])
    if attn_implementation == "eager":
        blocked = torch.finfo(torch.float32).min
        return torch.zeros(allowed.shape).masked_fill(~allowed, blocked)[None, None]
    return allowed[None, None]


def flex_tree_mask(subtree_end: torch.Tensor) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    def tree_mask(batch, head, q, kv):
        return (kv <= q) & (q < subtree_end[kv])

    length = len(subtree_end)
    return create_block_mask(tree_mask, B=None, H=None, Q_LEN=length, KV_LEN=length,
                             device=str(subtree_end.device))


def tree_mask_for(model: Any, subtree_end: torch.Tensor) -> Any:
    implementation = getattr(model.config, "_attn_implementation", "sdpa")
    if implementation == "flex_attention":
        return flex_tree_mask(subtree_end)
    return dense_tree_mask(subtree_end, attn_implementation=implementation)
