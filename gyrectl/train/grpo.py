"""GRPO's two pure pieces: group-relative advantages and the token-level policy-gradient loss.

Advantages. The executions of one GRPO group (one task's, and a batch holds whole groups) share a
baseline, computed over the group *as present in the batch* (infrastructure failures are not
present); ``training.advantage`` picks the estimator (docs/algorithms.md):

    grpo      A_i = (r_i - mean) / (std + 1e-4)          population std (ddof=0); DeepSeekMath
    dr_grpo   A_i = r_i - mean                           Dr. GRPO: no std, no difficulty reweighting
    rloo      A_i = r_i - (sum_{j != i} r_j) / (n - 1)   REINFORCE leave-one-out: an unbiased baseline

A group of one gets 0 in each: with nothing to compare against, its reward says nothing about
whether this attempt was better or worse than the policy's usual, so it must not push the policy.
Nor does a group whose rewards are all equal, exactly 0 (a float mean of equal values can be off
by one rounding, which ``grpo`` would divide by a tiny std; :mod:`gyrectl.train.signal` and the
coordinator count such groups as without signal). Each estimator gives one value per execution,
which multiplies every token weight of that execution: exact dedup stays exact whichever is used.

Loss. Decoupled PPO clipping (the proximal policy is separate from the behaviour policy):

    ratio_i = exp(logp_i - logp_prox_i)                       the clipped trust region
    is_i    = min(exp(logp_prox_i - behaviour_i), max_iw)     truncated importance weight (constant)
    loss    = -sum_i w_i * is_i * min(ratio_i * A_i, clip(ratio_i, 1-eps, 1+eps) * A_i)

over trained tokens (non-zero ``w_i``, the dedup loss weight, already normalised over the whole
batch: summed over micro-batches and ranks, this is the step's loss). The trainer takes one
optimizer step per batch, so the proximal policy *is* the current weights (``logp.detach()``):
the ratio is 1 in value and ``grad logp`` in gradient, clipping never binds, and the staleness
of tokens sampled by older weights (recorded by vLLM as ``behaviour``) is corrected by ``is_i``
alone, truncated so one very unlikely token cannot dominate the step. A token without a
behaviour logprob (NaN: not recorded) gets ``is_i = 1``.

Statistics are returned as sums (:class:`LossStats`) so they add over micro-batches and ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

ADVANTAGE_EPS = 1e-4
ADVANTAGE_ESTIMATORS = ("grpo", "dr_grpo", "rloo")
"""The values of ``training.advantage``."""


def group_advantages(*, rewards: Mapping[str, float], groups: Mapping[str, str],
                     estimator: str = "grpo") -> dict[str, float]:
    """Advantage of every execution in ``rewards``; ``groups`` maps an execution to its group,
    ``estimator`` is one of :data:`ADVANTAGE_ESTIMATORS` (the module docstring)."""
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; one of {ADVANTAGE_ESTIMATORS}")
    members: dict[str, list[str]] = {}
    for execution in rewards:
        members.setdefault(groups[execution], []).append(execution)
    out: dict[str, float] = {}
    for group in members.values():
        r = np.array([rewards[e] for e in group], dtype=np.float64)
        out.update(zip(group, _one_group(r, estimator).tolist(), strict=True))
    return out


def _one_group(r: np.ndarray, estimator: str) -> np.ndarray:
    if len(r) == 1 or bool((r == r[0]).all()):
        return np.zeros_like(r)
    if estimator == "grpo":
        return (r - r.mean()) / (r.std() + ADVANTAGE_EPS)
    if estimator == "dr_grpo":
        return r - r.mean()
    return r - (r.sum() - r) / (len(r) - 1)  # rloo: each member's baseline leaves it out


def token_advantages(*, execution_index: torch.Tensor, executions: Sequence[str],
                     advantages: Mapping[str, float]) -> torch.Tensor:
    """Per packed token: the advantage of the execution it belongs to."""
    per_execution = torch.tensor([advantages[e] for e in executions], dtype=torch.float32)
    return per_execution.to(execution_index.device)[execution_index]


@dataclass(frozen=True)
class LossStats:
    """Sums over trained tokens; add them up over micro-batches and ranks, then read the means."""

    num_tokens: float = 0.0
    num_clipped: float = 0.0
    """Tokens whose clipped surrogate was the smaller one (no gradient through them)."""
    importance_weight_sum: float = 0.0
    kl_sum: float = 0.0
    """k3 estimate of KL(behaviour || current) summed over tokens with a behaviour logprob."""
    num_kl_tokens: float = 0.0

    def __add__(self, other: LossStats) -> LossStats:
        return LossStats(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)))

    def as_tuple(self) -> tuple[float, ...]:
        return (self.num_tokens, self.num_clipped, self.importance_weight_sum, self.kl_sum, self.num_kl_tokens)

    @property
    def clip_fraction(self) -> float:
        return self.num_clipped / self.num_tokens if self.num_tokens else 0.0

    @property
    def mean_importance_weight(self) -> float:
        return self.importance_weight_sum / self.num_tokens if self.num_tokens else 0.0

    @property
    def kl(self) -> float:
        return self.kl_sum / self.num_kl_tokens if self.num_kl_tokens else 0.0


@dataclass(frozen=True)
class PolicyLoss:
    loss: torch.Tensor
    """Scalar, differentiable: this micro-batch's share of the step loss."""
    stats: LossStats


def policy_loss(*, logprob: torch.Tensor, behaviour_logprob: torch.Tensor, advantage: torch.Tensor,
                loss_weight: torch.Tensor, clip_eps: float, max_importance_weight: float,
                proximal_logprob: torch.Tensor | None = None) -> PolicyLoss:
    """The loss of the module docstring over trained tokens (all arguments aligned, 1-D).

    ``proximal_logprob`` defaults to ``logprob.detach()`` (one optimizer step per batch); pass
    it to reuse the loss for several steps over one batch."""
    logprob = logprob.float()
    proximal = logprob.detach() if proximal_logprob is None else proximal_logprob.float()
    behaviour = behaviour_logprob.float()
    known = ~torch.isnan(behaviour)
    # torch.where, not masking after the exp: exp(NaN) would poison the gradient-free path anyway.
    log_is = torch.where(known, proximal - behaviour, torch.zeros_like(proximal))
    importance = torch.clamp(torch.exp(log_is), max=max_importance_weight).detach()

    ratio = torch.exp(logprob - proximal)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantage
    surrogate = torch.minimum(unclipped, clipped)
    loss = -(loss_weight.float() * importance * surrogate).sum()

    with torch.no_grad():
        log_ratio = torch.where(known, logprob - behaviour, torch.zeros_like(logprob))
        k3 = torch.exp(log_ratio) - 1.0 - log_ratio  # KL(behaviour || current), sampled from behaviour
        stats = LossStats(num_tokens=float(len(logprob)), num_clipped=float((clipped < unclipped).sum()),
                          importance_weight_sum=float(importance.sum()), kl_sum=float(k3[known].sum()),
                          num_kl_tokens=float(known.sum()))
    return PolicyLoss(loss=loss, stats=stats)
