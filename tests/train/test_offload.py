"""The resident trainer's offload: a no-op on CPU, and the optimizer-state move it does on a GPU
(each DTensor rebuilt around its moved local shard) leaves AdamW going on exactly as before.
The GPU path itself (pinned host memory, ``model.to``) needs a GPU run."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from gyrectl.train.distributed import close_world, init_world, shard_model
from gyrectl.train.offload import _move_optimizer_state, offload, onload


def test_rebuilt_optimizer_state_trains_on_exactly_as_the_original(tiny_model_dir):
    world = init_world()
    try:
        models, optimizers = [], []
        for _ in range(2):
            model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32,
                                                         attn_implementation="sdpa")
            model = shard_model(model, world=world, compute_dtype=torch.float32)
            models.append(model)
            optimizers.append(torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0))
        ids = torch.arange(12).reshape(1, 12)

        def step(model, optimizer):
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        for model, optimizer in zip(models, optimizers):
            step(model, optimizer)
        offload(models[1], optimizers[1], device=world.device)  # CPU: nothing moves
        onload(models[1], optimizers[1], device=world.device)
        _move_optimizer_state(optimizers[1], lambda t: t.clone())  # what the GPU path does, minus the device
        moved = next(iter(optimizers[1].state.values()))["exp_avg"]
        assert type(moved).__name__ == "DTensor"
        for model, optimizer in zip(models, optimizers):
            step(model, optimizer)
        for a, b in zip(models[0].parameters(), models[1].parameters()):
            assert torch.equal(a.full_tensor(), b.full_tensor())
    finally:
        close_world()
