"""A real step (in this process, a group of one) with issue 27's loss shapes set: a loss
aggregation other than the token mean, clip-higher, dual clip and GSPO's sequence ratio, on trees
split across micro-batches. Its gradient norm equals the per-path reference's (every root-to-leaf
path its own causal forward, ``reference_losses``: no gyrectl code). With one optimizer step per
batch the proximal policy is the current weights, so no clip binds and the sequence ratio is 1:
what the step shows is the aggregation's weights, exact under dedup, through the whole pipeline."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gyrectl.train.grpo import group_advantages
from gyrectl.train.step import run_step

from reference_losses import Clip, reference_loss
from train_run import TRAINING, make_run, path_sequences, record_calls, rollouts, write_batch

TASKS = {"a": ("t", 1.0), "b": ("t", 0.0), "c": ("t", 0.25), "d": ("u", 0.5), "e": ("u", 0.0)}
SHAPES = {
    "gspo": dict(loss_aggregation="seq_mean_token_mean", ratio_level="sequence", clip_eps_low=3e-4,
                 clip_eps_high=4e-4),
    "dr_grpo": dict(advantage="dr_grpo", loss_aggregation="constant", loss_constant=64.0, clip_eps_high=0.28,
                    dual_clip=3.0),
}


def naive_gradient_norm(model, batch, training) -> float:
    advantages = group_advantages(rewards={r.execution: r.reward for r in batch},
                                  groups={r.execution: r.task for r in batch}, estimator=training.advantage)
    seqs = path_sequences(model, batch, advantages)
    clip = Clip(low=training.clip_eps_low or training.clip_eps, high=training.clip_eps_high or training.clip_eps,
                dual=training.dual_clip)
    model.zero_grad()
    reference_loss(seqs, mode=training.loss_aggregation, level=training.ratio_level, clip=clip,
                   cap=training.max_importance_weight, constant=training.loss_constant).backward()
    return float(torch.cat([p.grad.flatten() for p in model.parameters()]).double().norm())


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_real_step_with_a_loss_shape_has_the_per_path_gradient(tmp_path, tiny_model_dir, tiny_model, shape):
    training = dataclasses.replace(TRAINING, micro_batch_tokens=96, **SHAPES[shape])
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir, training=training)
    batch = rollouts(tiny_model, tasks=TASKS, seed=3)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    line = run_step(run=run, step=0)
    assert line["micro_batches"] > len(TASKS)  # trees split across micro-batches
    assert line["grad_norm"] == pytest.approx(naive_gradient_norm(tiny_model, batch, training), rel=1e-5)
    assert line["clip_fraction"] == 0.0  # one optimizer step per batch: every ratio is 1
    assert line["clip_fraction_low"] == line["clip_fraction_high"] == line["dual_clip_fraction"] == 0.0
