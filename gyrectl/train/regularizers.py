"""The step's two regularisers beside the policy-gradient term, as pure functions of logits and
logprobs: the policy's entropy and a KL penalty towards a frozen reference model.

    loss = policy term - entropy_coef * sum_i w_i H_i + kl_coef * sum_i w_i k(logp_i, ref_i)

over trained tokens, with ``w_i`` the same dedup loss weights as the policy term (normalised over
the whole batch, so the sums over micro-batches and ranks are the batch's weighted means).

Entropy. ``H_i = -sum_v p(v) log p(v)`` of the policy's next-token distribution at token *i*'s
parent: the distribution it was sampled from. Needs every logit of the row, so it is computed
from the head's output rows the trainer keeps anyway (one per trained token), in chunks of rows
(:data:`ENTROPY_CHUNK_ELEMENTS` values at a time) so that softmax and its gradient never take a
second full ``tokens x vocabulary`` array. Raising it (``entropy_coef > 0``) keeps the policy from
collapsing onto one continuation too early.

KL to the reference. Schulman's estimators ("Approximating KL divergence", 2020,
http://joschu.net/blog/kl-approx.html) of ``KL(policy || reference)`` from tokens sampled by the
policy, with ``log r = ref - logp``:

    k1          logp - ref                     = -log r            unbiased, can be negative
    k3          exp(ref - logp) - (ref - logp) - 1 = r - 1 - log r  unbiased, never negative
    low_var_kl  verl's k3: log r clamped to [-20, 20], the result to [-10, 10]

As a *loss* (differentiated through ``logp``, samples held fixed) they do not give the gradient of
``KL(policy || reference)``: k1's expected gradient is ``E[grad logp] = 0``, k3's is ``E[(1 - r)
grad logp] = -sum_v ref(v) grad log p(v)``, the gradient of ``KL(reference || policy)``; k3 is
what GRPO (DeepSeekMath) and verl's default ``low_var_kl`` use.

Why both are exact under tree dedup: every quantity above is a function of one trained token and
its prefix (the parent's distribution, the token's logprob under each model), so it is the same
number for every path through the token; weighting it by ``w_i = n_i / N`` (``n_i`` paths through
token *i*) gives the per-path mean, exactly as it does for the policy term.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KL_ESTIMATORS = ("k1", "k3", "low_var_kl")
"""The values of ``training.kl_estimator``."""
ENTROPY_CHUNK_ELEMENTS = 1 << 24
"""Logits per entropy chunk (64 MB in float32): ~110 rows of a 152k vocabulary at a time."""
LOW_VAR_KL_LOG_RATIO_BOUND, LOW_VAR_KL_BOUND = 20.0, 10.0
"""verl's clamps in ``low_var_kl`` (``verl/trainer/ppo/core_algos.py``, ``kl_penalty_forward``)."""


def token_entropy(logits: torch.Tensor, *, chunk_rows: int | None = None) -> torch.Tensor:
    """Entropy (nats) of the softmax of each row of ``logits`` (``[n, V]``, float32),
    differentiable; at most ``chunk_rows`` rows' softmax exist at once (default: rows of
    :data:`ENTROPY_CHUNK_ELEMENTS` values)."""
    rows = chunk_rows or max(1, ENTROPY_CHUNK_ELEMENTS // max(logits.shape[-1], 1))
    return _ChunkedEntropy.apply(logits, rows)


class _ChunkedEntropy(torch.autograd.Function):
    """``H = lse - sum p l``, with ``dH/dl = -p (log p + H)``. Saves only the logits (which autograd
    keeps for the logprobs anyway) and recomputes each chunk's softmax in the backward: plain
    autograd would keep a full softmax for it."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, rows: int) -> torch.Tensor:
        ctx.save_for_backward(logits)
        ctx.rows = rows
        out = logits.new_empty(logits.shape[:-1])
        for start in range(0, logits.shape[0], rows):
            chunk = logits[start:start + rows]
            log_p = torch.log_softmax(chunk, dim=-1)
            out[start:start + rows] = -(log_p.exp() * log_p).sum(dim=-1)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (logits,) = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], ctx.rows):
            log_p = torch.log_softmax(logits[start:start + ctx.rows], dim=-1)
            p = log_p.exp()
            entropy = -(p * log_p).sum(dim=-1, keepdim=True)
            grad[start:start + ctx.rows] = -p * (log_p + entropy) * grad_out[start:start + ctx.rows, None]
        return grad, None


def kl_estimate(logprob: torch.Tensor, ref_logprob: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per token, the estimator's sample of ``KL(policy || reference)`` (module docstring);
    differentiable through ``logprob``."""
    if estimator == "k1":
        return logprob - ref_logprob
    log_r = ref_logprob - logprob
    if estimator == "k3":
        return torch.exp(log_r) - log_r - 1.0
    if estimator == "low_var_kl":
        log_r = torch.clamp(log_r, min=-LOW_VAR_KL_LOG_RATIO_BOUND, max=LOW_VAR_KL_LOG_RATIO_BOUND)
        return torch.clamp(torch.exp(log_r) - log_r - 1.0, min=-LOW_VAR_KL_BOUND, max=LOW_VAR_KL_BOUND)
    raise ValueError(f"unknown KL estimator {estimator!r}; one of {KL_ESTIMATORS}")


@dataclass(frozen=True)
class RegularizerStats:
    """Weighted sums over trained tokens (the dedup weights); add them up over micro-batches and
    ranks, then read the means: the per-path means, as the loss sees them."""

    weight_sum: float = 0.0
    entropy_sum: float = 0.0
    kl_sum: float = 0.0
    kl_weight_sum: float = 0.0
    """``weight_sum`` of the micro-batches a reference model scored (all of them, or none)."""

    def __add__(self, other: RegularizerStats) -> RegularizerStats:
        return RegularizerStats(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)))

    def as_tuple(self) -> tuple[float, ...]:
        return (self.weight_sum, self.entropy_sum, self.kl_sum, self.kl_weight_sum)

    @property
    def entropy(self) -> float:
        """The policy's mean token entropy (nats) over trained tokens."""
        return self.entropy_sum / self.weight_sum if self.weight_sum else 0.0

    @property
    def kl_ref(self) -> float | None:
        """The mean of ``training.kl_estimator`` against the reference (None: no reference)."""
        return self.kl_sum / self.kl_weight_sum if self.kl_weight_sum else None


@dataclass(frozen=True)
class Regularization:
    loss: torch.Tensor | None
    """This micro-batch's share of the regularisers' loss (None when both are off, so the step's
    loss is the policy term's own tensor, bit for bit)."""
    stats: RegularizerStats


def regularization(*, logits: torch.Tensor, logprob: torch.Tensor, ref_logprob: torch.Tensor | None,
                   loss_weight: torch.Tensor, entropy_coef: float, kl_coef: float,
                   kl_estimator: str) -> Regularization:
    """The module docstring's two terms over trained tokens (rows of ``logits`` and all other
    arguments aligned): the entropy always measured (without a graph when ``entropy_coef`` is 0),
    the KL when the reference's logprobs are given."""
    weight = loss_weight.to(logits.dtype)  # float32 in the trainer: the policy term's rounding of the weights
    with torch.set_grad_enabled(torch.is_grad_enabled() and bool(entropy_coef)):  # else only measured
        entropy = token_entropy(logits)
    terms = [-entropy_coef * (weight * entropy).sum()] if entropy_coef else []
    kl_sum = kl_weight_sum = 0.0
    if ref_logprob is not None:
        kl = kl_estimate(logprob, ref_logprob.to(logprob.dtype), kl_estimator)
        if kl_coef:
            terms.append(kl_coef * (weight * kl).sum())
        kl_sum, kl_weight_sum = float((weight * kl.detach()).sum()), float(weight.sum())
    stats = RegularizerStats(weight_sum=float(weight.sum()), entropy_sum=float((weight * entropy.detach()).sum()),
                             kl_sum=kl_sum, kl_weight_sum=kl_weight_sum)
    return Regularization(loss=sum(terms[1:], terms[0]) if terms else None, stats=stats)
