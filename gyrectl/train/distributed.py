"""The trainer's process group and how the model is spread over it.

One code path for every world size: under ``torchrun`` the group comes from its environment
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR/PORT``); run as a plain process, it is a
group of one over an in-process store (no port to pick). gloo on CPU, nccl on CUDA.

The model is sharded with FSDP2 (``fully_shard`` per decoder layer, then the whole model), also
in a group of one, so the state-dict and gradient code never branches on the world size.
Gradients are *summed* over ranks, not averaged: dedup's loss weights are already normalised
over the whole batch, so the per-rank losses add up to the step's loss.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard


@dataclass(frozen=True)
class World:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_world() -> World:
    """Joins torchrun's process group, or makes a group of one when not under torchrun."""
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if "RANK" in os.environ:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group(backend, device_id=device if cuda else None)
    else:
        device = torch.device("cuda", 0) if cuda else torch.device("cpu")
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return World(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device)


def close_world() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def shard_model(model: torch.nn.Module, *, world: World, compute_dtype: torch.dtype) -> torch.nn.Module:
    """FSDP2 over the whole group. Parameters stay in their (float32 master) dtype; forward and
    backward run in ``compute_dtype``; gradients are reduced in float32."""
    mesh = init_device_mesh(world.device.type, (world.world_size,))
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in layer_classes:  # the decoder layers (HF names them)
            fully_shard(module, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():  # each call reaches one FSDP module's own parameters only
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # sum over ranks (see the module docstring)
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM: gloo has no PREMUL_SUM
    return model


def sum_over_ranks(values: Sequence[float], *, world: World) -> list[float]:
    """Element-wise sum of a few scalars over every rank (float64, so counts stay exact)."""
    return _reduce(values, dist.ReduceOp.SUM, world=world)


def max_over_ranks(values: Sequence[float], *, world: World) -> list[float]:
    """Element-wise largest of a few scalars over every rank."""
    return _reduce(values, dist.ReduceOp.MAX, world=world)


def _reduce(values: Sequence[float], op: dist.ReduceOp.RedOpType, *, world: World) -> list[float]:
    tensor = torch.tensor(list(values), dtype=torch.float64,
                          device=world.device if world.device.type == "cuda" else "cpu")
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def barrier() -> None:
    dist.barrier()
