"""A resident trainer's state off the GPU while it waits for its next step.

Between steps the GPU memory of a resident trainer's cell holds nothing it needs: :func:`offload`
moves the model's parameters (FSDP2 shards) and AdamW's state to host memory, :func:`onload`
brings them back before the next step. On CPU both do nothing (the state is in host memory
already); the GPU path is checked by ``tests/train/test_offload.py`` on a GPU machine and
measured by ``benchmarks/gpu/offload.py`` (docs/performance.md). The KL penalty's frozen
reference model (:mod:`gyrectl.train.reference`) moves the same way, without optimizer state.

What the GPU path does: the parameters move with ``nn.Module.to`` (FSDP2's ``_apply`` re-registers
its sharded parameters, and DTensor parameters are swapped in place, so the optimizer's keys stay
the same objects; that copy goes to ordinary, unpinned host memory); AdamW's state, two float32
tensors per parameter and so the bulk, is copied into pinned host memory as plain local shards
(each DTensor is rebuilt on onload with its mesh and placements), so the copy back is a fast DMA.
``tests/train/test_offload.py`` checks both paths where it runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.distributed.tensor import DTensor

_SHARDED: weakref.WeakKeyDictionary[torch.optim.Optimizer, dict[tuple[int, str], tuple]] = weakref.WeakKeyDictionary()
"""While offloaded: how to rebuild each optimizer-state DTensor around its local shard (its mesh,
placements, global shape and stride). The shard is kept as a plain tensor meanwhile, because
``DTensor.from_local`` moves a local tensor onto its mesh's device: a DTensor cannot stay in host
memory on a CUDA mesh (seen on an H200: the state stayed on the GPU)."""


def offload(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, *, device: torch.device) -> None:
    """Parameters and optimizer state to host memory (AdamW's state pinned); nothing on CPU.
    ``optimizer`` None: a model without one (the frozen reference of the KL penalty)."""
    if device.type == "cpu":
        return
    model.to("cpu")
    if optimizer is not None:
        stash_state(optimizer,
                    lambda t: torch.empty_like(t, device="cpu", pin_memory=True).copy_(t, non_blocking=True))
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()


def onload(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, *, device: torch.device) -> None:
    """The inverse of :func:`offload`: back onto ``device`` before the next step."""
    if device.type == "cpu":
        return
    model.to(device)
    if optimizer is not None:
        restore_state(optimizer, lambda t: t.to(device, non_blocking=True))
    torch.cuda.synchronize(device)


def stash_state(optimizer: torch.optim.Optimizer, move: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Each optimizer-state tensor replaced by ``move`` of its local shard (DTensors remembered)."""
    sharded = _SHARDED.setdefault(optimizer, {})
    for index, state in enumerate(optimizer.state.values()):
        for key, value in state.items():
            if _moves(key, value):
                if isinstance(value, DTensor):
                    sharded[(index, key)] = (value.device_mesh, value.placements, value.shape, value.stride())
                    value = value.to_local()
                state[key] = move(value)


def restore_state(optimizer: torch.optim.Optimizer, move: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """The inverse of :func:`stash_state`: ``move`` of each shard, DTensors rebuilt around them."""
    sharded = _SHARDED.pop(optimizer, {})
    for index, state in enumerate(optimizer.state.values()):
        for key, value in state.items():
            if _moves(key, value):
                value = move(value)
                if (index, key) in sharded:
                    mesh, placements, shape, stride = sharded[(index, key)]
                    value = DTensor.from_local(value, mesh, placements, run_check=False, shape=shape, stride=stride)
                state[key] = value


def _moves(key: str, value: object) -> bool:
    # AdamW keeps its step counter on the CPU unless capturable/fused: it stays where it is.
    return isinstance(value, torch.Tensor) and not (key == "step" and value.device.type == "cpu" and
                                                    not isinstance(value, DTensor))
