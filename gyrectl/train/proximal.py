"""The proximal policy of a batch trained in several updates (``training.updates_per_batch`` > 1):
each scored token's logprob under the weights the step started from (vN), computed before the
first update and held fixed through the others, so that update j's ratio ``exp(logp - logp_prox)``
measures how far updates 1..j-1 moved the policy and the clips (and GSPO's sequence ratio) bind.

The first mini-batch needs none: its update runs at vN itself, where ``logp.detach()`` is the
proximal logprob (:func:`gyrectl.train.grpo.policy_loss`'s default). The others get one forward
pass each, without gradient, over the micro-batches this rank will train (round-robin, as the
step takes them): a float per scored token kept until its update. As in the step, every rank runs
the same number of passes (FSDP2's all-gathers must pair up), a rank with fewer repeating one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from gyrectl.dedup.packing import PackedMicroBatch
from gyrectl.train.distributed import World
from gyrectl.train.forward import target_logprobs
from gyrectl.train.loss_shape import scored_targets
from gyrectl.train.packed import packed_tensors

Proximal = list[torch.Tensor] | None
"""One mini-batch's proximal logprobs: per micro-batch of this rank, per scored target (None: the
current weights')."""


def rank_passes(micro_batches: tuple[PackedMicroBatch, ...], world: World) -> Iterator[tuple[PackedMicroBatch, bool]]:
    """This rank's passes over ``micro_batches``: its own (round-robin), each with ``True``, then as
    many spare passes over the first (``False``: their results must count for nothing) as it takes
    for every rank to run the same number, so that FSDP2's collectives pair up."""
    mine = micro_batches[world.rank::world.world_size]
    for k in range(math.ceil(len(micro_batches) / world.world_size)):
        yield (mine[k], True) if k < len(mine) else (micro_batches[0], False)


@torch.no_grad()
def proximal_logprobs(*, model: torch.nn.Module, mini_batches: tuple[tuple[PackedMicroBatch, ...], ...],
                      world: World, ratio_level: str) -> list[Proximal]:
    """Per mini-batch: None for the first, the current weights' logprobs of each of this rank's
    micro-batches' :func:`scored_targets` for every other."""
    out: list[Proximal] = [None]
    for micro_batches in mini_batches[1:]:
        logprobs = []
        for micro, real in rank_passes(micro_batches, world):
            tensors = packed_tensors(micro, world.device)
            logprob = target_logprobs(model, tensors, scored_targets(tensors, ratio_level=ratio_level))
            if real:
                logprobs.append(logprob.float())
        out.append(logprobs)
    return out
