"""Runs an HF causal LM on a packed micro-batch and scores tokens: shared by the trainer and the
gradient proof.

A token is predicted from the logits at its *parent's* packed index: after a branch point the
parent is not at i-1 (the usual shift would leave a branch's first token predicted from its
sibling subtree). HF's ``labels`` loss cannot express that, so the LM head is applied only at
the parent rows of the scored tokens (``logits_to_keep`` with indices) and the log-softmax
gathered here -- which also skips the head for context-only tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from gyrectl.train.mask import tree_mask_for


def target_logprobs(model: Any, batch: dict[str, torch.Tensor], targets: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probability of each token in ``targets`` (packed indices; default: every token with a
    non-zero loss weight) given its ancestors. ``batch`` is
    :func:`gyrectl.train.packed.packed_tensors` of a micro-batch."""
    if targets is None:
        targets = torch.nonzero(batch["loss_weight"] != 0).flatten()
    return logprobs_of(target_logits(model, batch, targets), batch["input_ids"][targets])


def target_logits(model: Any, batch: dict[str, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """The float32 logits (``[len(targets), V]``) of the distribution each token in ``targets`` was
    sampled from: the head's output at its parent's row, and only there."""
    assert bool((batch["parent_index"][targets] >= 0).all()), "a root token has nothing to predict it"
    rows = batch["parent_index"][targets]
    out = model(input_ids=batch["input_ids"][None], position_ids=batch["position_ids"][None],
                attention_mask=tree_mask_for(model, batch["subtree_end"]), logits_to_keep=rows, use_cache=False)
    return out.logits[0].float()


def logprobs_of(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[token]`` of each row, without a full log-softmax array."""
    return logits.gather(1, tokens[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)


def packed_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``-sum_i w_i log p(token_i | ancestors)``: summed over micro-batches, the step's NLL loss."""
    targets = torch.nonzero(batch["loss_weight"] != 0).flatten()
    return -(batch["loss_weight"][targets].to(torch.float32) * target_logprobs(model, batch, targets)).sum()
