"""The trained weights as the HF folder the servers load, written by every rank at once.

    tensors       the model's parameters (a tied head once, as the embedding) and persistent buffers
    assign_files  each tensor to one rank's file, largest first onto the least-loaded rank
    gather        one tensor at a time, cast to ``model.dtype`` first: every rank takes part in
                  the all-gather of each shard; the rank whose file holds it keeps the full tensor
    write         each rank ``model-0000R-of-0000W.safetensors``; rank 0 the index
                  ``model.safetensors.index.json``, the config (with the dtype), tokenizer and
                  generation files of the version before, and the step's record
    commit        rank 0 renames the temporary folder into ``checkpoints/v{N}`` once every rank
                  wrote (the step's commit point; see :mod:`gyrectl.train.checkpoint`)

A rank holds at most its share of the model in ``model.dtype`` plus one full tensor: never a
float32 copy of the whole model, never any optimizer state. HF and vLLM read sharded
safetensors through the index.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from gyrectl.run.rundir import RunDir
from gyrectl.store.folders import commit_folder
from gyrectl.train.checkpoint import INDEX, STEP_RECORD, WEIGHT_FILES
from gyrectl.train.distributed import World, barrier
from gyrectl.train.policy_load import tied_aliases


def export_policy(*, run: RunDir, version: int, model: torch.nn.Module, dtype: torch.dtype,
                  step_record: dict[str, Any], world: World) -> Path:
    """Collective: writes weights version ``version`` atomically; returns its folder."""
    final = run.weights_dir(version)
    tmp = _shared_tmp(run, final, world=world)
    tensors = exported_tensors(model)
    sizes = {name: t.numel() * dtype.itemsize for name, t in tensors.items()}
    owner = assign_files(sizes, parts=world.world_size)
    mine: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():  # the same order on every rank: the gathers pair up
        full = tensor.to(dtype).full_tensor() if isinstance(tensor, DTensor) else tensor.to(dtype)
        if owner[name] == world.rank:
            # A copy, never a view: an untied head stays untied (safetensors refuses shared storage).
            mine[name] = full.detach().to("cpu", copy=True).contiguous()
        del full
    if mine:
        from safetensors.torch import save_file

        save_file(mine, tmp / file_name(world.rank, parts=world.world_size), metadata={"format": "pt"})
    del mine
    barrier()  # every rank's file is written
    if world.is_main:
        _write_folder_files(run=run, version=version, tmp=tmp, dtype=dtype, step_record=step_record,
                            weight_map={name: file_name(owner[name], parts=world.world_size) for name in tensors},
                            total_size=sum(sizes.values()))
        commit_folder(tmp, final)
    return final


def exported_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What the folder holds, by state-dict name: parameters (aliases once) and persistent buffers."""
    skip = tied_aliases(model)
    return {name: tensor.detach() for name, tensor in model.state_dict(keep_vars=True).items() if name not in skip}


def assign_files(sizes: dict[str, int], *, parts: int) -> dict[str, int]:
    """Tensor name -> the part (rank) whose file holds it: largest first, each onto the part with
    the fewest bytes so far (the lowest index among equals). Deterministic, so every rank
    computes the same answer without talking."""
    load = [0] * parts
    out = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        part = min(range(parts), key=lambda p: (load[p], p))
        out[name] = part
        load[part] += sizes[name]
    return out


def file_name(part: int, *, parts: int) -> str:
    return f"model-{part + 1:05d}-of-{parts:05d}.safetensors"


def _shared_tmp(run: RunDir, final: Path, *, world: World) -> Path:
    """Rank 0 clears what a crashed attempt left and makes a fresh temporary folder, named after
    its pid (an attempt that lingers cannot write into this one); every rank learns the name."""
    name = [None]
    if world.is_main:
        for stale in run.checkpoints_dir.glob(f".{final.name}.tmp*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = run.checkpoints_dir / f".{final.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        name = [tmp.name]
    dist.broadcast_object_list(name, src=0)
    return run.checkpoints_dir / name[0]


def _write_folder_files(*, run: RunDir, version: int, tmp: Path, dtype: torch.dtype, step_record: dict[str, Any],
                        weight_map: dict[str, str], total_size: int) -> None:
    from transformers import AutoConfig

    source = run.weights_dir(version - 1)
    for item in source.iterdir():
        if item.is_file() and not item.name.endswith(WEIGHT_FILES):
            shutil.copy2(item, tmp / item.name)
    config = AutoConfig.from_pretrained(source)
    config.dtype = dtype
    config.save_pretrained(tmp)
    (tmp / INDEX).write_text(json.dumps({"metadata": {"total_size": total_size}, "weight_map": weight_map},
                                        indent=2, sort_keys=True) + "\n")
    (tmp / STEP_RECORD).write_text(json.dumps(step_record, sort_keys=True) + "\n")
