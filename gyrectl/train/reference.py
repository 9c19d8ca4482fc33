"""The KL penalty's frozen reference model (``training.kl_coef > 0``), beside the policy.

    folder     ``checkpoints/reference`` (linked at launch to ``training.kl_reference``), else
               ``training.kl_reference`` as given, else v0 (the link to ``model.path``)
    loaded     once per trainer process, sharded like the policy (FSDP2, each rank reading its own
               slices, :func:`gyrectl.train.policy_load.read_sharded_weights`) but stored in the
               compute dtype (``model.dtype``): c P / R bytes per rank, no gradient, no optimizer
               state. The policy's forward casts its float32 master weights to that same dtype,
               so a reference equal to v0 scores step 0 exactly as the policy does (KL 0)
    scored     under no_grad at the same parent rows as the policy, before the policy's forward:
               its gathered layers and logits are gone before the policy's are made
    resharded  after each forward: FSDP2 leaves the root module's parameters (embedding, head)
               gathered after a forward, for the backward it expects; the reference has none
    kept       by a resident trainer across steps, moved to host memory with the policy while the
               cells serve (:mod:`gyrectl.train.offload`)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.fsdp import FSDPModule

from gyrectl.config.schema import TrainingConfig
from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir
from gyrectl.train.distributed import World, shard_model
from gyrectl.train.forward import logprobs_of, target_logits
from gyrectl.train.policy_load import empty_model, read_sharded_weights


@dataclass
class Reference:
    model: torch.nn.Module
    folder: Path
    """Where its weights came from, resolved (a resident trainer reloads when the config names
    another)."""


def reference_folder(run: RunDir, training: TrainingConfig) -> Path | None:
    """The reference's weights folder, resolved; None when ``kl_coef`` is 0 (no reference)."""
    if training.kl_coef <= 0:
        return None
    if not training.kl_reference:
        return run.weights_dir(0).resolve()
    folder = run.reference_dir if run.reference_dir.exists() else Path(training.kl_reference)
    return folder.resolve()


def load_reference(folder: Path, *, world: World, compute_dtype: torch.dtype) -> Reference:
    """Collective: the frozen model of ``folder``, sharded over the group, in ``compute_dtype``."""
    if not (folder / "config.json").is_file():
        raise UserError(f"training.kl_reference: {folder} is not an HF model folder (no config.json)")
    model = shard_model(empty_model(folder, device=world.device, dtype=compute_dtype), world=world,
                        compute_dtype=compute_dtype)
    read_sharded_weights(model, folder=folder, world=world, what="the KL reference (training.kl_reference)")
    model.requires_grad_(False)
    return Reference(model=model.eval(), folder=folder)


@torch.no_grad()
def reference_logprobs(reference: Reference, batch: dict[str, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """The reference's log-probability of each token in ``targets`` (as
    :func:`gyrectl.train.forward.target_logprobs` for the policy)."""
    model: Any = reference.model
    logprob = logprobs_of(target_logits(model, batch, targets), batch["input_ids"][targets])
    if isinstance(model, FSDPModule):
        model.reshard()  # the root's gathered parameters: no backward will free them
    return logprob
