"""GSPO's sequence-level ratio (Zheng et al. 2025, "Group Sequence Policy Optimization") on a
packed micro-batch of deduplicated trees, exact against training on every root-to-leaf path.

A *sequence* is one root-to-leaf path p with ``T_p`` its trainable tokens. Its ratio to the
proximal policy is the geometric mean of its tokens' ratios, clipped per path:

    s_p  = exp( (1 / |T_p|) sum_{t in T_p} (logp_t - logp_prox_t) )
    loss = -sum_p c_p sum_{t in T_p} is_t * f(s_p, A_p)     f: grpo.clipped_surrogate

``c_p`` is the path's per-token weight of ``training.loss_aggregation`` (``dedup.exact``), ``is_t``
the token's truncated importance weight to the behaviour policy, ``A_p`` its execution's
advantage. The gradient is GSPO's: ``s_p`` reaches token t as ``s_p grad logp_t`` (verl's
"GSPO-token" form ``sg[s_p] exp(logp_t - sg[logp_t])``, equal in value and gradient), and not at
all where a clip binds for the path. With one optimizer step per batch the proximal policy is the
current weights, ``s_p = 1``, and the loss equals the token level's with the same weights; with
``training.updates_per_batch`` > 1 the proximal logprobs are the step's starting weights'
(:mod:`gyrectl.train.proximal`) and ``s_p`` moves from the second update on.

Why it stays exact under tree dedup. A token shared by several paths enters each path's ``s_p``
and takes each path's term, so its loss is ``is_t sum_{p through t} c_p f_p`` and its gradient
coefficient ``is_t sum_{p through t} c_p g_p`` (``g_p = s_p A_p``, or 0 where clipped): per-path
numbers summed over the paths through it. Packed trees are in DFS order, so the paths through t
are the leaves in ``[t, subtree_end[t])`` and the tokens on the path ending at q are the t with
``t <= q < subtree_end[t]``: both sums are prefix sums over the packed sequence
(:func:`subtree_sums`, :func:`path_sums`), O(L), no path-token incidence matrix. A tree split
across micro-batches keeps every path whole in the piece that ends it (its prefix is recomputed
there as context, ``dedup.packing``): each piece scores its context's trainable tokens too and
covers the paths ending in it, so the pieces' terms add up to every path's exactly once.
"""

from __future__ import annotations

import torch

from gyrectl.train.grpo import (
    ClipRange,
    LossStats,
    PolicyLoss,
    clip_stats,
    clipped_surrogate,
    token_stats,
    truncated_importance,
)


def path_sums(values: torch.Tensor, subtree_end: torch.Tensor) -> torch.Tensor:
    """For every packed position q, the sum of ``values`` over q's ancestors and q itself (the t
    with ``t <= q < subtree_end[t]``), in float64: +value at t, -value at its subtree's end,
    then a running sum."""
    values = values.double()
    delta = torch.zeros(len(values) + 1, dtype=torch.float64, device=values.device)
    delta[:len(values)] += values
    delta.index_add_(0, subtree_end, -values)
    return torch.cumsum(delta, dim=0)[:len(values)]


def subtree_sums(values: torch.Tensor, subtree_end: torch.Tensor) -> torch.Tensor:
    """For every packed position t, the sum of ``values`` over t's subtree ``[t, subtree_end[t])``,
    in float64."""
    prefix = torch.cat([torch.zeros(1, dtype=torch.float64, device=values.device),
                        torch.cumsum(values.double(), dim=0)])
    return prefix[subtree_end] - prefix[:-1]


def _spread(values: torch.Tensor, positions: torch.Tensor, length: int) -> torch.Tensor:
    out = torch.zeros(length, dtype=torch.float64, device=values.device)
    out[positions] = values.double()
    return out


def sequence_policy_loss(*, logprob: torch.Tensor, behaviour_logprob: torch.Tensor, targets: torch.Tensor,
                         subtree_end: torch.Tensor, path_weight: torch.Tensor, advantage: torch.Tensor,
                         loss_weight: torch.Tensor, clip: ClipRange, max_importance_weight: float,
                         proximal_logprob: torch.Tensor | None = None) -> PolicyLoss:
    """The loss of the module docstring for one packed micro-batch.

    ``logprob``, ``behaviour_logprob`` and ``proximal_logprob`` (default ``logprob.detach()``)
    are over ``targets``: every trainable token of the micro-batch, recomputed context included.
    ``subtree_end``, ``path_weight``, ``advantage`` and ``loss_weight`` cover the whole packed
    sequence. The statistics count the micro-batch's own trained tokens (non-zero loss weight)
    and its paths (the clip fractions count paths)."""
    logprob = logprob.float()
    proximal = logprob.detach() if proximal_logprob is None else proximal_logprob.float()
    behaviour = behaviour_logprob.float()
    importance = truncated_importance(proximal, behaviour, max_importance_weight)
    length = len(subtree_end)
    with torch.no_grad():
        ends = torch.nonzero(path_weight != 0).flatten()
        log_ratio = path_sums(_spread(logprob - proximal, targets, length), subtree_end)[ends]
        num_tokens = path_sums(_spread(torch.ones_like(logprob), targets, length), subtree_end)[ends]
        ratio = torch.exp(log_ratio / num_tokens)
        path_advantage = advantage[ends].double()
        surrogate = clipped_surrogate(ratio, path_advantage, clip)
        weight = path_weight[ends].double()
        slope = torch.where(surrogate.no_gradient, torch.zeros_like(ratio), ratio * path_advantage)
        token_value = subtree_sums(_spread(weight * surrogate.value, ends, length), subtree_end)[targets]
        token_slope = subtree_sums(_spread(weight * slope, ends, length), subtree_end)[targets]
    # Value sum_t is_t sum_p c_p f_p; gradient sum_t is_t (sum_p c_p g_p) grad logp_t.
    loss = -(importance * (token_value.float() + token_slope.float() * (logprob - logprob.detach()))).sum()
    owned = loss_weight[targets] != 0
    stats = (token_stats(logprob=logprob[owned], behaviour=behaviour[owned], importance=importance[owned])
             + clip_stats(surrogate) + LossStats(num_sequences=float(len(ends))))
    return PolicyLoss(loss=loss, stats=stats)
