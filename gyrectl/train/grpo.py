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
    f_i     = min(ratio_i * A_i, clip(ratio_i, 1-eps_low, 1+eps_high) * A_i)
    f_i     = max(f_i, c * A_i)  where A_i < 0, with dual clip c > 1 (else as above)
    loss    = -sum_i w_i * is_i * f_i

over trained tokens (non-zero ``w_i``, the dedup loss weight, already normalised over the whole
batch by ``training.loss_aggregation``: summed over micro-batches and ranks, this is the step's
loss). ``eps_low`` and ``eps_high`` are ``training.clip_eps`` unless ``clip_eps_low`` /
``clip_eps_high`` say otherwise (DAPO's clip-higher); ``c`` is ``training.dual_clip`` (Ye et al.
2020; off by default). With one optimizer step per batch (``training.updates_per_batch: 1``, the
default) the proximal policy *is* the current weights (``logp.detach()``): the ratio is 1 in value
and ``grad logp`` in gradient, no clip binds, and the staleness of tokens sampled by older weights (recorded by vLLM as
``behaviour``) is corrected by ``is_i`` alone, truncated so one very unlikely token cannot
dominate the step. With several updates per batch the proximal logprobs are the step's starting
weights' (:mod:`gyrectl.train.proximal`), and the ratio moves from the second update on. A token
without a behaviour logprob (NaN: not recorded) gets ``is_i = 1``.
``training.ratio_level: sequence`` (GSPO) clips one ratio per root-to-leaf path instead:
:mod:`gyrectl.train.sequence_ratio`, which shares :func:`clipped_surrogate` with this loss.

Statistics are returned as sums (:class:`LossStats`) so they add over micro-batches and ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

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
class ClipRange:
    """Where the surrogate stops rewarding a ratio's move: ``[1 - low, 1 + high]``, and with
    ``dual`` (> 1) the floor ``dual x A`` under a negative advantage."""

    low: float
    high: float
    dual: float | None = None

    @classmethod
    def of(cls, training: Any) -> ClipRange:
        """From ``training.clip_eps`` / ``clip_eps_low`` / ``clip_eps_high`` / ``dual_clip``."""
        low = training.clip_eps if training.clip_eps_low is None else training.clip_eps_low
        high = training.clip_eps if training.clip_eps_high is None else training.clip_eps_high
        return cls(low=low, high=high, dual=training.dual_clip)


@dataclass(frozen=True)
class Surrogate:
    value: torch.Tensor
    """``f`` of the module docstring, differentiable through the ratio where no clip binds."""
    clipped_low: torch.Tensor
    """bool: ``A < 0`` and ``ratio < 1 - low``: the clipped term was the smaller (no gradient)."""
    clipped_high: torch.Tensor
    """bool: ``A > 0`` and ``ratio > 1 + high``: likewise."""
    dual_clipped: torch.Tensor
    """bool: ``A < 0`` and the floor ``dual x A`` was the larger (no gradient)."""

    @property
    def no_gradient(self) -> torch.Tensor:
        return self.clipped_low | self.clipped_high | self.dual_clipped


def clipped_surrogate(ratio: torch.Tensor, advantage: torch.Tensor, clip: ClipRange) -> Surrogate:
    """PPO's pessimistic surrogate with (asymmetric) clipping and the optional dual clip."""
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1.0 - clip.low, 1.0 + clip.high) * advantage
    value = torch.minimum(unclipped, clipped)
    bound = clipped < unclipped  # for A < 0 that is ratio < 1 - low, for A > 0 ratio > 1 + high
    negative = advantage < 0
    dual = torch.zeros_like(bound)
    if clip.dual is not None:
        floor = clip.dual * advantage
        dual = negative & (floor > value)
        value = torch.where(dual, floor, value)
    return Surrogate(value=value, clipped_low=bound & negative, clipped_high=bound & (advantage > 0),
                     dual_clipped=dual)


@dataclass(frozen=True)
class LossStats:
    """Sums over trained tokens; add them up over micro-batches and ranks, then read the means.
    Fields are appended, never reordered: the step sums ``as_tuple()`` over ranks and rebuilds."""

    num_tokens: float = 0.0
    num_clipped: float = 0.0
    """Clip units (tokens, or paths at the sequence level) whose clipped surrogate was the smaller
    one (no gradient through them): ``num_clipped_low + num_clipped_high``."""
    importance_weight_sum: float = 0.0
    kl_sum: float = 0.0
    """k3 estimate of KL(behaviour || current) summed over tokens with a behaviour logprob."""
    num_kl_tokens: float = 0.0
    num_clipped_low: float = 0.0
    """Clipped at ``1 - eps_low`` under a negative advantage."""
    num_clipped_high: float = 0.0
    """Clipped at ``1 + eps_high`` under a positive advantage."""
    num_dual_clipped: float = 0.0
    """Held at the dual-clip floor ``c x A``."""
    num_sequences: float = 0.0
    """Paths whose sequence ratio was clipped or not (``ratio_level: sequence``); 0 at the token
    level. When non-zero the clip fractions count paths, not tokens (GSPO clips whole paths)."""

    def __add__(self, other: LossStats) -> LossStats:
        return LossStats(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)))

    def as_tuple(self) -> tuple[float, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    def _per_clip_unit(self, count: float) -> float:
        units = self.num_sequences or self.num_tokens
        return count / units if units else 0.0

    @property
    def clip_fraction(self) -> float:
        return self._per_clip_unit(self.num_clipped)

    @property
    def clip_fraction_low(self) -> float:
        return self._per_clip_unit(self.num_clipped_low)

    @property
    def clip_fraction_high(self) -> float:
        return self._per_clip_unit(self.num_clipped_high)

    @property
    def dual_clip_fraction(self) -> float:
        return self._per_clip_unit(self.num_dual_clipped)

    @property
    def mean_importance_weight(self) -> float:
        return self.importance_weight_sum / self.num_tokens if self.num_tokens else 0.0

    @property
    def kl(self) -> float:
        return self.kl_sum / self.num_kl_tokens if self.num_kl_tokens else 0.0

    def metrics(self) -> dict[str, float]:
        """The ``metrics.jsonl`` keys these statistics give (``kl``, ``clip_fraction`` and
        ``importance_weight_mean`` as before; the clip fractions by side added)."""
        return {"kl": self.kl, "clip_fraction": self.clip_fraction, "clip_fraction_low": self.clip_fraction_low,
                "clip_fraction_high": self.clip_fraction_high, "dual_clip_fraction": self.dual_clip_fraction,
                "importance_weight_mean": self.mean_importance_weight}


@dataclass(frozen=True)
class PolicyLoss:
    loss: torch.Tensor
    """Scalar, differentiable: this micro-batch's share of the step loss."""
    stats: LossStats


def truncated_importance(proximal: torch.Tensor, behaviour: torch.Tensor, cap: float) -> torch.Tensor:
    """``is_i`` of the module docstring (constant): 1 where the behaviour logprob is unknown."""
    known = ~torch.isnan(behaviour)
    # torch.where, not masking after the exp: exp(NaN) would poison the gradient-free path anyway.
    log_is = torch.where(known, proximal - behaviour, torch.zeros_like(proximal))
    return torch.clamp(torch.exp(log_is), max=cap).detach()


@torch.no_grad()
def token_stats(*, logprob: torch.Tensor, behaviour: torch.Tensor, importance: torch.Tensor) -> LossStats:
    """Token counts, importance weights and the k3 KL(behaviour || current) over the given tokens."""
    known = ~torch.isnan(behaviour)
    log_ratio = torch.where(known, logprob - behaviour, torch.zeros_like(logprob))
    k3 = torch.exp(log_ratio) - 1.0 - log_ratio  # KL(behaviour || current), sampled from behaviour
    return LossStats(num_tokens=float(len(logprob)), importance_weight_sum=float(importance.sum()),
                     kl_sum=float(k3[known].sum()), num_kl_tokens=float(known.sum()))


@torch.no_grad()
def clip_stats(surrogate: Surrogate) -> LossStats:
    low, high = float(surrogate.clipped_low.sum()), float(surrogate.clipped_high.sum())
    return LossStats(num_clipped=low + high, num_clipped_low=low, num_clipped_high=high,
                     num_dual_clipped=float(surrogate.dual_clipped.sum()))


def policy_loss(*, logprob: torch.Tensor, behaviour_logprob: torch.Tensor, advantage: torch.Tensor,
                loss_weight: torch.Tensor, clip_eps: float, max_importance_weight: float,
                proximal_logprob: torch.Tensor | None = None, clip: ClipRange | None = None) -> PolicyLoss:
    """The loss of the module docstring over trained tokens (all arguments aligned, 1-D).

    ``clip`` defaults to the symmetric ``[1 - clip_eps, 1 + clip_eps]`` without dual clip (given,
    it wins over ``clip_eps``). ``proximal_logprob`` defaults to ``logprob.detach()`` (one
    optimizer step per batch); pass it to reuse the loss for several steps over one batch."""
    clip = ClipRange(low=clip_eps, high=clip_eps) if clip is None else clip
    logprob = logprob.float()
    proximal = logprob.detach() if proximal_logprob is None else proximal_logprob.float()
    behaviour = behaviour_logprob.float()
    importance = truncated_importance(proximal, behaviour, max_importance_weight)
    surrogate = clipped_surrogate(torch.exp(logprob - proximal), advantage, clip)
    loss = -(loss_weight.float() * importance * surrogate.value).sum()
    stats = token_stats(logprob=logprob, behaviour=behaviour, importance=importance) + clip_stats(surrogate)
    return PolicyLoss(loss=loss, stats=stats)
