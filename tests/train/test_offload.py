"""The resident trainer's offload leaves AdamW going on exactly as before. On CPU offload is a
no-op and the test checks the optimizer-state move the GPU path does (each DTensor rebuilt around
its moved local shard); on a GPU it checks the real thing: parameters and AdamW's state in
(pinned) host memory while offloaded, back on the GPU after onload, and the same next step."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from gyrectl.train.distributed import close_world, init_world, shard_model
from gyrectl.train.offload import offload, onload, restore_state, stash_state


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def test_offloaded_state_trains_on_exactly_as_the_original(tiny_model_dir):
    world = init_world()
    try:
        models, optimizers = [], []
        for _ in range(2):
            model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32,
                                                         attn_implementation="sdpa").to(world.device)
            model = shard_model(model, world=world, compute_dtype=torch.float32)
            models.append(model)
            optimizers.append(torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0))
        ids = torch.arange(12, device=world.device).reshape(1, 12)

        def step(model, optimizer):
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        for model, optimizer in zip(models, optimizers, strict=True):
            step(model, optimizer)
        offload(models[1], optimizers[1], device=world.device)
        exp_avg = [_local(s["exp_avg"]) for s in optimizers[1].state.values()]
        if world.device.type == "cuda":
            assert all(_local(p).device.type == "cpu" for p in models[1].parameters())
            assert all(t.device.type == "cpu" and t.is_pinned() for t in exp_avg)
        onload(models[1], optimizers[1], device=world.device)
        assert all(_local(p).device == _local(next(models[0].parameters())).device for p in models[1].parameters())
        if world.device.type == "cpu":  # the GPU path's stash and rebuild, minus the devices
            stash_state(optimizers[1], lambda t: t.clone())
            assert not any(type(s["exp_avg"]).__name__ == "DTensor" for s in optimizers[1].state.values())
            restore_state(optimizers[1], lambda t: t.clone())
        assert all(type(s["exp_avg"]).__name__ == "DTensor" for s in optimizers[1].state.values())
        for model, optimizer in zip(models, optimizers, strict=True):
            step(model, optimizer)
        for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
            assert torch.equal(a.full_tensor(), b.full_tensor())
    finally:
        close_world()
