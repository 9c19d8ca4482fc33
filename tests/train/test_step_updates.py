"""``training.updates_per_batch``: a real step (in this process, a group of one) that trains its
batch in two AdamW updates, one per mini-batch of whole groups, against the same recipe written
here on naive per-path losses (``reference_losses``: every root-to-leaf path its own causal forward,
no gyrectl code): the proximal logprobs are v0's for both updates, so the second update's ratios
have moved, and clips set tight enough to bind do bind. A negative control shows the check can
fail: the second update with the current weights as its proximal policy ends elsewhere."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM

from gyrectl.store.jsonl import read_records
from gyrectl.train.grpo import group_advantages
from gyrectl.train.step import run_step

from naive_paths import path_nll, root_to_leaf_paths, trainable_positions
from reference_losses import Clip, clip_counts, reference_loss
from train_run import (
    TRAINING,
    make_run,
    path_sequences,
    read_weights,
    record_calls,
    rollouts,
    torchrun_step,
    write_batch,
)

# Two groups (t, then u), so two mini-batches: {a, b, c} and {d, e}.
TASKS = {"a": ("t", 1.0), "b": ("t", 0.0), "c": ("t", 0.25), "d": ("u", 0.5), "e": ("u", 0.0)}
SHAPES = {
    "token": dict(advantage="rloo", clip_eps_low=0.002, clip_eps_high=0.003, dual_clip=1.5),
    "gspo": dict(loss_aggregation="seq_mean_token_mean", ratio_level="sequence", clip_eps_low=3e-4,
                 clip_eps_high=4e-4),
}


def reference_updates(tiny_model_dir, batch, training, *, fixed_proximal: bool = True):
    """Two AdamW updates, {a, b, c} then {d, e}, each its own loss aggregation, advantages over the
    whole batch; returns the model, each update's gradient norm and clip counts."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    adamw = torch.optim.AdamW(model.parameters(), lr=training.lr, weight_decay=training.weight_decay)
    advantages = group_advantages(rewards={r.execution: r.reward for r in batch},
                                  groups={r.execution: r.task for r in batch}, estimator=training.advantage)
    with torch.no_grad():  # v0's logprobs, taken before the first update
        proximal = {(r.execution, path): -path_nll(model, path, trainable_positions(path, list(r.records)))
                    for r in batch for path in root_to_leaf_paths(list(r.records))}
    clip = Clip(low=training.clip_eps_low, high=training.clip_eps_high, dual=training.dual_clip)
    norms, clipped = [], []
    for mini in ([r for r in batch if r.task == "t"], [r for r in batch if r.task == "u"]):
        seqs = path_sequences(model, mini, advantages, proximal if fixed_proximal else None)
        clipped.append(clip_counts(seqs, level=training.ratio_level, clip=clip))
        adamw.zero_grad()
        reference_loss(seqs, mode=training.loss_aggregation, level=training.ratio_level, clip=clip,
                       cap=training.max_importance_weight).backward()
        norms.append(float(torch.cat([p.grad.flatten() for p in model.parameters()]).double().norm()))
        adamw.step()
    return model, norms, clipped


def distance(weights: dict[str, torch.Tensor], model, start: dict[str, torch.Tensor]) -> float:
    """How far ``weights`` lie from ``model``'s, relative to how far ``model`` moved from ``start``."""
    params = dict(model.named_parameters())
    moved = torch.cat([(weights[n] - start[n]).flatten() for n in start])
    expected = torch.cat([(params[n].detach() - start[n]).flatten() for n in start])
    return float((moved - expected).norm() / expected.norm())


def two_update_run(tmp_path, tiny_model_dir, tiny_model, shape):
    training = dataclasses.replace(TRAINING, micro_batch_tokens=96, updates_per_batch=2, **SHAPES[shape])
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir, training=training)
    batch = rollouts(tiny_model, tasks=TASKS, seed=3)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    return run, batch, training


@pytest.mark.parametrize("shape", list(SHAPES))
def test_two_updates_per_batch_equal_the_per_path_recipe_with_v0_as_the_proximal_policy(
        tmp_path, tiny_model_dir, tiny_model, shape):
    run, batch, training = two_update_run(tmp_path, tiny_model_dir, tiny_model, shape)
    line = run_step(run=run, step=0)

    model, norms, clipped = reference_updates(tiny_model_dir, batch, training)
    assert line["updates"] == 2 and line["micro_batches"] > len(TASKS)  # trees split across micro-batches
    assert line["grad_norm"] == pytest.approx(sum(norms) / 2, rel=1e-5)
    # The first update runs at v0 (every ratio 1); the second's moved, and its clips bind.
    assert clipped[0] == (0, 0, 0) and sum(clipped[1]) > 0
    assert line["clip_fraction"] > 0.0
    v0 = {name: p.detach() for name, p in tiny_model.named_parameters()}
    v1 = read_weights(run.weights_dir(1))
    assert distance(v1, model, v0) <= 1e-4
    # Negative control: the second update's ratios taken to its own weights (no clip binds) end elsewhere.
    unclipped, _, _ = reference_updates(tiny_model_dir, batch, training, fixed_proximal=False)
    assert distance(v1, unclipped, v0) > 1e-2


def test_one_update_per_batch_is_the_whole_batch_in_one_mini_batch(tmp_path, tiny_model_dir, tiny_model):
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir, training=TRAINING)
    batch = rollouts(tiny_model, tasks=TASKS, seed=3)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    line = run_step(run=run, step=0)
    assert line["updates"] == 1 and line["clip_fraction"] == 0.0


@pytest.mark.torchrun
def test_two_ranks_take_the_proximal_logprobs_of_their_own_micro_batches(tmp_path, tiny_model_dir, tiny_model):
    """Each rank trains every other micro-batch of an update: its proximal logprobs must be of the
    same ones (a rank that took another's would clip the wrong tokens)."""
    run, batch, training = two_update_run(tmp_path, tiny_model_dir, tiny_model, "token")
    done = torchrun_step(run, step=0)
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = read_records(run.metrics_file)
    model, norms, _ = reference_updates(tiny_model_dir, batch, training)
    assert (line["world_size"], line["updates"]) == (2, 2) and line["clip_fraction"] > 0.0
    assert line["grad_norm"] == pytest.approx(sum(norms) / 2, rel=1e-5)
    v0 = {name: p.detach() for name, p in tiny_model.named_parameters()}
    assert distance(read_weights(run.weights_dir(1)), model, v0) <= 1e-4
