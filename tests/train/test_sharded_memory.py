"""No rank ever holds the full optimizer state or a full float32 copy of the model: measured.

A model of 18 M parameters (71 MB in float32, 143 MB of AdamW moments) trains two steps on four
ranks; each rank's memory is read per part of the step (:mod:`gyrectl.train.memory`, resident
set on CPU, every allocation over 64 KiB its own mapping so a free shows). A rank that gathered
the whole optimizer state, or the whole model, would add at least that much during the part
that did it; a rank that holds its quarter adds about a quarter. (Four ranks, not two: a rank's
share then stays well clear of the whole, transients included.) Seen: restoring added 0.42 of
the whole state, saving 0.06; reading the weights 0.55-0.81 of the model, writing them 0.38.
"""

from __future__ import annotations

import dataclasses

import pytest

from gyrectl.config import load_config
from gyrectl.model.tiny import TinyModelSpec, build_tiny_model
from gyrectl.plan.memory import memory_plan
from gyrectl.plan.shape import model_shape
from gyrectl.store.jsonl import read_records

from train_run import TRAINING, make_run, record_calls, rollouts, torchrun_step, write_batch

pytestmark = pytest.mark.torchrun

SPEC = TinyModelSpec(hidden_size=256, intermediate_size=1024, num_layers=16, num_heads=4, num_kv_heads=2)
TIGHT_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "65536"}
RANKS = 4


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, tiny_model):
    model_dir = tmp_path_factory.mktemp("models") / "mid"
    params = build_tiny_model(model_dir, SPEC)["params"]
    run = make_run(tmp_path_factory.mktemp("memory"), tiny_model_dir=model_dir,
                   training=dataclasses.replace(TRAINING, micro_batch_tokens=256))
    for step in (0, 1):  # step 1 restores the optimizer state step 0 saved
        batch = rollouts(tiny_model, tasks={f"a{step}": ("t", 1.0), f"b{step}": ("t", 0.0)}, seed=step,
                         version=step)
        record_calls(run, batch)
        write_batch(run, step=step, batch=batch)
        done = torchrun_step(run, step=step, nproc=RANKS, env=TIGHT_MALLOC)
        assert done.returncode == 0, done.stderr[-4000:]
    return (params, list(read_records(run.metrics_file)),
            memory_plan(load_config(run.config_file), model_shape(str(model_dir))))


def test_no_rank_holds_the_full_optimizer_state(two_steps):
    params, lines, _ = two_steps
    full_state_gb = 2 * 4 * params / 1e9  # AdamW's two float32 moments per parameter
    step1 = lines[1]
    assert step1["optimizer_state"] == "loaded" and step1["world_size"] == RANKS
    for line in lines:
        assert line["memory_gb"]["save_state"] < full_state_gb, line["memory_gb"]
    # Restoring allocates this rank's quarter of the moments (and, for a moment, of the
    # gradients): the meter sees that much, and nowhere near the whole state.
    assert full_state_gb / RANKS < step1["memory_gb"]["load_state"] < full_state_gb, step1["memory_gb"]


def test_no_rank_holds_a_full_float32_copy_of_the_model(two_steps):
    params, lines, _ = two_steps
    model_gb = 4 * params / 1e9
    for line in lines:
        memory = line["memory_gb"]
        # Reading: this rank's quarter of the parameters, plus the pages of its slices of the
        # files while they are mapped; writing: its quarter of the folder plus one full tensor at
        # a time (the largest, the embedding, is 6 % of the model).
        assert model_gb / RANKS < memory["load_weights"] < model_gb, memory
        assert memory["save_weights"] < model_gb, memory
        assert line["peak_memory_gb"] > max(memory.values())


def test_the_memory_plan_bounds_what_forward_and_backward_add(two_steps):
    """``gyrectl plan``'s formulas against a measurement: what forward and backward add to a rank
    is its gradient shard, the gathered weights, the activations, logits and mask of a
    micro-batch -- planned for a full ``micro_batch_tokens`` budget, so an upper bound."""
    params, lines, plan = two_steps
    parts = ("gathered_weights", "activations", "logits", "attention_mask")
    planned_gb = (4 * params / RANKS + sum(plan.train[p] for p in parts)) / 1e9
    for line in lines:
        measured = line["memory_gb"]["forward_backward"]
        print(f"forward_backward: measured {measured} GB, planned {planned_gb:.4f} GB")
        assert 0.6 * planned_gb < measured <= planned_gb
