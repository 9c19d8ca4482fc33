"""A resident trainer's state off the GPU while it waits for its next step.

Between steps the GPU memory of a resident trainer's cell holds nothing it needs: :func:`offload`
moves the model's parameters (FSDP2 shards) and AdamW's state to host memory, :func:`onload`
brings them back before the next step. On CPU both do nothing (the state is in host memory
already), so the CPU tests run this module's no-op path only: the GPU path is untested until a
GPU run exercises it.

What the GPU path does: the parameters move with ``nn.Module.to`` (FSDP2's ``_apply`` re-registers
its sharded parameters, and DTensor parameters are swapped in place, so the optimizer's keys stay
the same objects; that copy goes to ordinary, unpinned host memory); AdamW's state, two float32
tensors per parameter and so the bulk, is copied into pinned host memory (a DTensor keeps its mesh
and placements, only its local shard moves), so the copy back is a fast DMA.
``tests/train/test_offload.py`` checks both paths where it runs.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor


def offload(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, device: torch.device) -> None:
    """Parameters and optimizer state to host memory (AdamW's state pinned); nothing on CPU."""
    if device.type == "cpu":
        return
    model.to("cpu")
    _move_optimizer_state(optimizer, _to_pinned_host)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()


def onload(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, device: torch.device) -> None:
    """The inverse of :func:`offload`: back onto ``device`` before the next step."""
    if device.type == "cpu":
        return
    model.to(device)
    _move_optimizer_state(optimizer, lambda t: t.to(device, non_blocking=True))
    torch.cuda.synchronize(device)


def _to_pinned_host(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(tensor, device="cpu", pin_memory=True).copy_(tensor, non_blocking=True)


def _move_optimizer_state(optimizer: torch.optim.Optimizer, move) -> None:
    for state in optimizer.state.values():
        for key, value in state.items():
            if not isinstance(value, torch.Tensor) or (key == "step" and value.device.type == "cpu"):
                continue  # AdamW keeps its step counter on the CPU unless capturable/fused
            if isinstance(value, DTensor):
                state[key] = DTensor.from_local(move(value.to_local()), value.device_mesh, value.placements,
                                                run_check=False, shape=value.shape, stride=value.stride())
            else:
                state[key] = move(value)
