"""The tree attention mask, built from subtree ranges for the kernel in use.

Query q may see key kv iff ``kv <= q < subtree_end[kv]`` (kv is q or one of its ancestors).

* GPU: FlexAttention with a ``BlockMask`` built directly from the ranges at block level -- blocks
  wholly outside every subtree are skipped, blocks wholly inside skip the mask_mod, and nothing
  at token level is O(L^2).
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


def flex_tree_mask(subtree_end: torch.Tensor, *, block: int = 128) -> Any:
    """A FlexAttention ``BlockMask`` built from the ranges at block level: O((L/block)^2)
    booleans, never the O(L^2) token grid ``create_block_mask`` evaluates when not compiled.

    For query block j and key block k (q_lo = j*block): some key of k is visible to some query
    of j iff ``k == j`` (the diagonal) or ``k < j`` and ``max(subtree_end over k) > q_lo``; every
    pair is visible (a *full* block, no mask_mod needed) iff ``k < j`` and
    ``min(subtree_end over k) > q_hi``."""
    from torch.nn.attention.flex_attention import BlockMask

    length = len(subtree_end)
    num_blocks = -(-length // block)
    padded = torch.full((num_blocks * block,), -1, dtype=subtree_end.dtype, device=subtree_end.device)
    padded[:length] = subtree_end
    ends = padded.view(num_blocks, block)
    max_end = ends.max(dim=1).values
    min_end = torch.where(ends >= 0, ends, torch.iinfo(ends.dtype).max).min(dim=1).values
    q_lo = torch.arange(num_blocks, device=subtree_end.device) * block
    q_hi = torch.clamp(q_lo + block - 1, max=length - 1)
    earlier = torch.ones(num_blocks, num_blocks, dtype=torch.bool, device=subtree_end.device).tril(-1)
    full = earlier & (min_end[None, :] > q_hi[:, None])
    visible = earlier & (max_end[None, :] > q_lo[:, None])
    visible |= torch.eye(num_blocks, dtype=torch.bool, device=subtree_end.device)
    partial = visible & ~full

    def as_blocks(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        order = torch.argsort((~m).to(torch.int8), dim=1, stable=True)  # chosen blocks first
        return m.sum(dim=1).to(torch.int32)[None, None], order.to(torch.int32)[None, None]

    def tree_mask(batch, head, q, kv):
        # A kernel may evaluate the last, partly filled block past the end: never index outside.
        inside = kv < length
        return inside & (kv <= q) & (q < subtree_end[torch.clamp(kv, max=length - 1)])

    partial_num, partial_idx = as_blocks(partial)
    full_num, full_idx = as_blocks(full)
    return BlockMask.from_kv_blocks(partial_num, partial_idx, full_num, full_idx, BLOCK_SIZE=block,
                                    mask_mod=tree_mask, seq_lengths=(length, length))


def tree_mask_for(model: Any, subtree_end: torch.Tensor) -> Any:
    implementation = getattr(model.config, "_attn_implementation", "sdpa")
    if implementation == "flex_attention":
        return flex_tree_mask(subtree_end)
    return dense_tree_mask(subtree_end, attn_implementation=implementation)
