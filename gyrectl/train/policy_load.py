"""Weights version N into the sharded trainer, each rank reading only its own slices.

    config.json          -> the model built on the meta device (no memory for its weights)
    shard_model          -> FSDP2 over the group, still on the meta device
    to_empty(device)     -> each rank allocates its own shards, uninitialised
    DCP + HF reader      -> each rank reads the rows of every tensor it holds from the
                            ``*.safetensors`` files (any dtype: they are cast into float32)
    non-persistent       -> recomputed (rotary frequencies), as transformers does after its own
    buffers                 meta-device load

No rank ever holds the whole model: what one reads is its shard, at any world size, whatever
the layout of the folder (one file, or sharded files with an index). Attention: see
:func:`attention_for`.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageReader
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir
from gyrectl.train.checkpoint import require_policy
from gyrectl.train.distributed import World, shard_model


def empty_policy(*, run: RunDir, version: int, device: torch.device) -> torch.nn.Module:
    """The model of weights v``version`` on the meta device: its code and config, no weights
    (apart so that what loading the weights costs can be measured without the imports)."""
    require_policy(run=run, version=version)
    return empty_model(run.weights_dir(version), device=device)


def empty_model(folder: Path, *, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The model of the HF folder ``folder`` on the meta device, its parameters typed ``dtype``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=dtype,
                                                attn_implementation=attention_for(device))


def attention_for(device: torch.device) -> str:
    """FlexAttention on a GPU (the tree mask is a block-sparse ``BlockMask``: O((T/128)^2), not
    T^2); sdpa with the dense mask on CPU, where FlexAttention has no backward. The mask follows
    the model's choice (:func:`gyrectl.train.mask.tree_mask_for`)."""
    return "flex_attention" if device.type == "cuda" else "sdpa"


def load_policy(model: torch.nn.Module, *, run: RunDir, version: int, world: World, compute_dtype: torch.dtype,
                activation_checkpointing: bool = False) -> torch.nn.Module:
    """Collective: ``model`` (from :func:`empty_policy`) holding weights v``version`` as sharded
    float32 master weights, in training mode; with ``activation_checkpointing`` each decoder
    layer recomputes its activations in the backward pass."""
    folder = run.weights_dir(version)
    if activation_checkpointing:  # before sharding: FSDP2's hooks then gather again for the recompute
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = shard_model(model, world=world, compute_dtype=compute_dtype)
    read_sharded_weights(model, folder=folder, world=world, what=f"weights version {version}")
    return model.train()


def read_sharded_weights(model: torch.nn.Module, *, folder: Path, world: World, what: str) -> None:
    """Collective: allocates the sharded ``model``'s shards on this rank and reads them from the
    ``*.safetensors`` files of ``folder`` (cast into the parameters' dtype); ``what`` names the
    folder in the error when tensors are missing."""
    model.to_empty(device=world.device)
    aliases = tied_aliases(model)  # a tied head is read once, as the embedding
    state = {name: tensor for name, tensor in get_model_state_dict(model).items() if name not in aliases}
    reader = HuggingFaceStorageReader(str(folder))
    missing = sorted(set(state) - set(reader.read_metadata().state_dict_metadata))
    if missing:
        raise UserError(f"{folder}: the safetensors files lack {len(missing)} of the model's tensors "
                        f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); "
                        f"{what} is incomplete")
    dcp.load(state, storage_reader=reader)  # in place: the state dict's tensors are the parameters' shards
    for module in model.modules():
        if module._non_persistent_buffers_set:  # not in any checkpoint: computed from the config
            model._init_weights(module)


def tied_aliases(model: torch.nn.Module) -> set[str]:
    """Names of parameters that are another, earlier-named parameter (a tied LM head)."""
    seen: set[int] = set()
    aliases = set()
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in seen:
            aliases.add(name)
        seen.add(id(parameter))
    return aliases
