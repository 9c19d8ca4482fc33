"""The policy term of one packed micro-batch as ``training.*`` shapes it: which tokens are scored,
the token or the sequence ratio (``ratio_level``), and the clip range (``clip_eps``,
``clip_eps_low`` / ``clip_eps_high``, ``dual_clip``). The loss aggregation is already in the
micro-batch's weights (``dedup.exact``). One entry point so the step and the tests train the same
thing:

    targets = scored_targets(tensors, ratio_level=training.ratio_level)
    logprob = ... the model's logprobs of ``targets`` ...
    policy  = micro_batch_policy_loss(logprob=logprob, tensors=tensors, targets=targets,
                                      advantage=token_advantages(...), training=training)

With the defaults it is :func:`gyrectl.train.grpo.policy_loss` over the trained tokens with
``clip_eps``, bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch

from gyrectl.train.grpo import ClipRange, PolicyLoss, policy_loss
from gyrectl.train.sequence_ratio import sequence_policy_loss

RATIO_LEVELS = ("token", "sequence")
"""The values of ``training.ratio_level``."""


def scored_targets(tensors: dict[str, torch.Tensor], *, ratio_level: str) -> torch.Tensor:
    """Packed indices whose logprobs the policy term needs: the trained tokens (non-zero loss
    weight); at the sequence level every trainable token, so that the recomputed context of a
    split tree's piece counts in the ratios of the paths ending there (its loss weight stays 0)."""
    if ratio_level == "sequence":
        return torch.nonzero(tensors["trainable"]).flatten()
    return torch.nonzero(tensors["loss_weight"] != 0).flatten()


def micro_batch_policy_loss(*, logprob: torch.Tensor, tensors: dict[str, torch.Tensor], targets: torch.Tensor,
                            advantage: torch.Tensor, training: Any,
                            proximal_logprob: torch.Tensor | None = None) -> PolicyLoss:
    """The policy term over ``targets`` (:func:`scored_targets`); ``advantage`` per packed token,
    ``logprob`` and ``proximal_logprob`` (default: the current weights) per target."""
    clip = ClipRange.of(training)
    if training.ratio_level == "sequence":
        return sequence_policy_loss(
            logprob=logprob, behaviour_logprob=tensors["behaviour_logprob"][targets], targets=targets,
            subtree_end=tensors["subtree_end"], path_weight=tensors["path_weight"], advantage=advantage,
            loss_weight=tensors["loss_weight"], clip=clip, max_importance_weight=training.max_importance_weight,
            proximal_logprob=proximal_logprob)
    return policy_loss(logprob=logprob, behaviour_logprob=tensors["behaviour_logprob"][targets],
                       advantage=advantage[targets], loss_weight=tensors["loss_weight"][targets],
                       clip_eps=training.clip_eps, clip=clip, max_importance_weight=training.max_importance_weight,
                       proximal_logprob=proximal_logprob)
