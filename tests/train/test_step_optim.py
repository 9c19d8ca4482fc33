"""The step with issue 27's knobs set (in this process, a group of one, each step a fresh trainer
as a process of its own would be): rloo advantages, a linear schedule after one warmup step,
weight decay and a gradient clipped hard, against the same recipe written here on the naive
per-path gradient with torch's own ``clip_grad_norm_`` and ``AdamW``."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM

from gyrectl.config import dump_config, load_config
from gyrectl.store.jsonl import read_records
from gyrectl.train.grpo import group_advantages
from gyrectl.train.step import run_step

from train_run import (
    TRAINING,
    make_run,
    naive_grpo_loss,
    read_trainer_state,
    read_weights,
    record_calls,
    rollouts,
    write_batch,
)

STEPS = 4
KNOBS = dict(advantage="rloo", lr_schedule="linear", warmup_steps=1, weight_decay=0.1, max_grad_norm=0.05)
TASKS = [{"a0": ("t", 1.0), "b0": ("t", 0.0), "c0": ("t", 0.25), "d0": ("u", 0.5), "e0": ("u", 0.0)},
         {"a1": ("t", 0.0), "b1": ("t", 1.0), "c1": ("u", 0.75), "d1": ("u", 0.5)}]


def naive_gradient(model, batch, training):
    advantages = group_advantages(rewards={r.execution: r.reward for r in batch},
                                  groups={r.execution: r.task for r in batch}, estimator=training.advantage)
    model.zero_grad()
    naive_grpo_loss(model, batch, advantages, training).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def test_the_knobs_in_a_real_step_equal_torch_on_the_naive_gradient(tmp_path, tiny_model_dir, tiny_model):
    training = dataclasses.replace(TRAINING, **KNOBS)
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir, training=training)
    config = load_config(run.config_file)
    run.config_file.write_text(dump_config(dataclasses.replace(config, run=dataclasses.replace(config.run,
                                                                                               steps=STEPS))))
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    reference.eval()
    adamw = torch.optim.AdamW(reference.parameters(), lr=training.lr, weight_decay=training.weight_decay)
    expected_lrs = [0.0, training.lr]  # step 0 warms up from 0; step 1 is the peak: (4 - 1) / (4 - 1)
    for step, tasks in enumerate(TASKS):
        batch = rollouts(tiny_model, tasks=tasks, seed=step, version=step)
        record_calls(run, batch)
        write_batch(run, step=step, batch=batch)
        line = run_step(run=run, step=step)
        # The reference: the naive gradient at the reference's weights, torch's clipping, AdamW at the lr.
        grads = naive_gradient(reference, batch, training)
        for name, p in reference.named_parameters():
            p.grad = grads[name]
        exact = float(torch.cat([g.flatten() for g in grads.values()]).double().norm())
        norm = float(torch.nn.utils.clip_grad_norm_(reference.parameters(), training.max_grad_norm))
        adamw.param_groups[0]["lr"] = expected_lrs[step]
        adamw.step()
        assert line["lr"] == expected_lrs[step]
        # The norm before clipping (10x the bound and more): equal to the naive gradient's in float64,
        # and to what torch's clip_grad_norm_ returned (its float32 sum drifts by ~1e-5).
        assert line["grad_norm"] == pytest.approx(exact, rel=1e-5)
        assert line["grad_norm"] == pytest.approx(norm, rel=1e-4)
        assert line["grad_norm"] > 10 * training.max_grad_norm
    # Step 0 (lr 0) moved no weight; its clipped gradient went into AdamW's moments (step 1 shows it).
    assert all(torch.equal(read_weights(run.weights_dir(1))[k], v) for k, v in read_weights(run.weights_dir(0)).items())
    # Step 1: decay, the clipped gradients of both steps in the moments, the peak lr.
    v2 = read_weights(run.weights_dir(2))
    v0 = {name: p.detach() for name, p in tiny_model.named_parameters()}
    moved = torch.cat([(v2[name] - v0[name]).flatten() for name in v0])
    expected = torch.cat([(p.detach() - v0[name]).flatten() for name, p in reference.named_parameters()])
    assert float((moved - expected).norm() / expected.norm()) <= 1e-4  # seen: 3e-6; no decay: 5e-3
    state = read_trainer_state(run, version=2, scratch=tmp_path)["optimizer"]
    assert {g["weight_decay"] for g in state["param_groups"]} == {training.weight_decay}
    assert [r["lr"] for r in read_records(run.metrics_file)] == expected_lrs
