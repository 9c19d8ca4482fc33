"""Policy-gradient losses written from the papers, one sequence at a time in plain torch, with no
gyrectl code: the references the loss-shape and dedup proofs compare against.

A sequence is what training without dedup sees as one sample (a root-to-leaf path of a tree):
its trained tokens' current, proximal and behaviour logprobs and one advantage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class Sequence:
    logp: torch.Tensor
    """Current logprobs of the trained tokens (differentiable)."""
    proximal: torch.Tensor
    behaviour: torch.Tensor
    """NaN: not recorded (importance weight 1)."""
    advantage: float


@dataclass(frozen=True)
class Clip:
    low: float = 0.2
    high: float = 0.2
    dual: float | None = None


def surrogate(r: torch.Tensor, a: float, clip: Clip) -> torch.Tensor:
    """One token's PPO surrogate (Schulman et al. 2017) with DAPO's separate bounds (Yu et al.
    2025) and, for a negative advantage, dual clip's floor (Ye et al. 2020)."""
    clipped_r = torch.clamp(r, 1 - clip.low, 1 + clip.high)
    f = min(r * a, clipped_r * a)
    if clip.dual is not None and a < 0:
        f = max(f, torch.tensor(clip.dual * a, dtype=r.dtype))
    return f


def importance(proximal: float, behaviour: float, cap: float) -> float:
    """Truncated importance weight to the behaviour policy; 1 where it is unknown."""
    return 1.0 if math.isnan(behaviour) else min(math.exp(proximal - behaviour), cap)


def token_terms(seq: Sequence, *, level: str, clip: Clip, cap: float) -> torch.Tensor:
    """Each trained token's ``is_t x f`` in one sequence. ``token``: each token's own ratio.
    ``sequence``: GSPO-token (Zheng et al. 2025, as verl writes it): the value of the sequence's
    geometric-mean ratio, the gradient of the token's own logprob."""
    logp, prox = seq.logp.double(), seq.proximal.double()
    if not len(logp):
        return logp
    if level == "token":
        ratios = [torch.exp(logp[t] - prox[t]) for t in range(len(logp))]
    else:
        s = torch.exp((logp - prox).mean()).detach()
        ratios = [s * torch.exp(logp[t] - logp[t].detach()) for t in range(len(logp))]
    return torch.stack([importance(float(prox[t]), float(seq.behaviour[t]), cap) * surrogate(r, seq.advantage, clip)
                        for t, r in enumerate(ratios)])


def aggregate(terms: list[torch.Tensor], mode: str, constant: float | None = None) -> torch.Tensor:
    """verl's ``agg_loss`` modes (and Dr. GRPO's constant as its authors' code has it: each
    sequence's sum over the constant, then the mean over sequences); sequences without a
    trained token are not samples."""
    terms = [t for t in terms if len(t)]
    if mode == "token_mean":
        return torch.cat(terms).sum() / sum(len(t) for t in terms)
    if mode == "seq_mean_token_mean":
        return torch.stack([t.mean() for t in terms]).mean()
    if mode == "seq_mean_token_sum":
        return torch.stack([t.sum() for t in terms]).mean()
    assert mode == "constant"
    return torch.stack([t.sum() / constant for t in terms]).mean()


def reference_loss(seqs: list[Sequence], *, mode: str, level: str = "token", clip: Clip = Clip(),
                   cap: float = 2.0, constant: float | None = None) -> torch.Tensor:
    return -aggregate([token_terms(s, level=level, clip=clip, cap=cap) for s in seqs], mode, constant)


def gspo_paper_loss(seqs: list[Sequence], clip: Clip) -> torch.Tensor:
    """GSPO's objective as the paper writes it (no importance weights to a behaviour policy):
    the mean over sequences of ``min(s A, clip(s) A)``, ``s`` differentiated as a whole."""
    return -torch.stack([surrogate(torch.exp((s.logp.double() - s.proximal.double()).mean()), s.advantage, clip)
                         for s in seqs]).mean()


def clip_counts(seqs: list[Sequence], *, level: str, clip: Clip) -> tuple[int, int, int]:
    """(clipped low, clipped high, held at the dual floor), counting tokens or sequences."""
    low = high = dual = 0
    for seq in seqs:
        log_ratio = (seq.logp - seq.proximal).detach().double()
        ratios = log_ratio.exp().tolist() if level == "token" else [math.exp(float(log_ratio.mean()))]
        a = seq.advantage
        for r in ratios:
            low += a < 0 and r < 1 - clip.low
            high += a > 0 and r > 1 + clip.high
            # for a < 0, min(r a, clip(r) a) = max(r, 1 - low) a
            dual += clip.dual is not None and a < 0 and max(r, 1 - clip.low) * a < clip.dual * a
    return low, high, dual
