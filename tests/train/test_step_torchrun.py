"""The training step as the coordinator runs it: ``torchrun --nproc_per_node=2 -m gyrectl.train``
(gloo, FSDP2) on a real run directory, checked against naive per-path GRPO computed here.

Step 0 runs once per module (a torchrun start costs seconds on two cores); the tests then read
what it wrote, run step 1 as a plain process and step 2 on two ranks again (the world size
changes both ways: DCP reshards the optimizer state each rank wrote) and re-run step 0 (a no-op)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from gyrectl.store.jsonl import read_records
from gyrectl.train.checkpoint import trainer_state_dir
from gyrectl.train.grpo import group_advantages
from train_run import (TRAINING, make_run, naive_grpo_loss, read_trainer_state, record_calls, rollouts, torchrun_step,
                       train_step, write_batch)

pytestmark = pytest.mark.torchrun

# 400 tokens: three micro-batches (one holding two executions), so with two ranks one rank
# pads its second round with a zero-weight pass.
BUDGET = 400
STEP0 = {"e0": ("t0", 1.0), "e1": ("t0", 0.0), "e2": ("t0", 0.25), "e3": ("t1", 0.5)}
STEP1 = {"e10": ("t0", 0.0), "e11": ("t0", 1.0), "e12": ("t2", 0.75), "e13": ("t2", 0.5)}


@pytest.fixture(scope="module")
def step0(tmp_path_factory, tiny_model_dir, tiny_model):
    run = make_run(tmp_path_factory.mktemp("train"), tiny_model_dir=tiny_model_dir,
                   training=dataclasses.replace(TRAINING, micro_batch_tokens=BUDGET))
    batch = rollouts(tiny_model, tasks=STEP0, seed=0)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch, without_calls=("e9",))
    done = torchrun_step(run, step=0)
    assert done.returncode == 0, done.stderr[-4000:]
    return run, batch


def metrics(run) -> list[dict]:
    return list(read_records(run.metrics_file))


def naive_gradient(model, batch):
    advantages = group_advantages(rewards={r.execution: r.reward for r in batch},
                                  groups={r.execution: r.task for r in batch})
    model.zero_grad()
    loss = naive_grpo_loss(model, batch, advantages)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    return float(loss.detach()), grads


def test_torchrun_loss_and_gradient_equal_naive_per_path_training(step0, tiny_model):
    run, batch = step0
    (line,) = metrics(run)
    loss, grads = naive_gradient(tiny_model, batch)
    grad_norm = float(torch.cat([g.flatten() for g in grads.values()]).double().norm())
    assert abs(line["loss"] - loss) <= 1e-5 * abs(loss)
    # The norm of the gradient summed over both ranks: a rank's gradients averaged instead of
    # summed (FSDP2's default) or a missing micro-batch changes it far beyond this.
    assert abs(line["grad_norm"] - grad_norm) <= 1e-5 * grad_norm
    assert line["world_size"] == 2 and line["micro_batches"] == 3
    assert (line["step"], line["weight_version"], line["optimizer_state"]) == (0, 1, "fresh")
    assert (line["executions"], line["executions_skipped"]) == (4, 1)
    assert line["naive_tokens"] > line["unique_tokens"] > line["trained_tokens"] > 0
    assert line["dedup_ratio"] == pytest.approx(line["naive_tokens"] / line["unique_tokens"], rel=1e-3)
    assert line["clip_fraction"] == 0.0 and line["kl"] > 0.0  # one step per batch; noisy behaviour
    assert set(line["time_s"]) == {"load", "batch", "forward_backward", "optimizer", "save"}
    assert line["trainer"] == "started"


def test_each_rank_wrote_its_own_shard_of_the_optimizer_state(step0):
    run, _ = step0
    folder = trainer_state_dir(run=run, version=1)
    assert (folder / ".metadata").is_file()
    assert sorted(p.name for p in folder.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert not list(run.optimizer_dir.glob(".v*.tmp"))


def test_v1_is_an_hf_folder_one_adamw_step_from_v0(step0, tiny_model, tiny_model_dir):
    run, batch = step0
    v1 = AutoModelForCausalLM.from_pretrained(run.weights_dir(1), dtype=torch.float32)
    AutoTokenizer.from_pretrained(run.weights_dir(1))
    assert not v1.config.tie_word_embeddings
    saved = load_file(str(run.weights_dir(1) / "model.safetensors"))
    assert "lm_head.weight" in saved and not torch.equal(saved["lm_head.weight"], saved["model.embed_tokens.weight"])
    # The reference: v0 plus one AdamW step (lr from the config) on the naive gradient.
    _, grads = naive_gradient(tiny_model, batch)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    for name, p in reference.named_parameters():
        p.grad = grads[name]
    torch.optim.AdamW(reference.parameters(), lr=TRAINING.lr, weight_decay=0.0).step()
    v0 = {name: p.detach() for name, p in tiny_model.named_parameters()}
    moved, expected = [], []
    for name, p in reference.named_parameters():
        moved.append((v1.state_dict()[name] - v0[name]).flatten())
        expected.append((p.detach() - v0[name]).flatten())
        assert moved[-1].abs().max() > 0, f"{name} did not change"
    # Adam's first step is lr * g / (|g| + eps): entries whose gradient is near eps amplify the
    # 1e-7 differences of the gradients, so compare the whole update. (Adam is blind to a
    # gradient's scale: the gradient proof is the grad_norm check above.)
    moved, expected = torch.cat(moved), torch.cat(expected)
    assert float((moved - expected).norm() / expected.norm()) <= 1e-3  # seen: 1e-4


def test_step1_on_another_world_size_loads_the_optimizer_state(step0, tiny_model, tmp_path):
    run, _ = step0
    batch = rollouts(tiny_model, tasks=STEP1, seed=10, version=1)
    record_calls(run, batch)
    write_batch(run, step=1, batch=batch)
    assert (trainer_state_dir(run=run, version=1) / ".metadata").is_file()
    done = train_step(run, step=1)  # a plain process: world size 1 after 2
    assert done.returncode == 0, done.stderr[-4000:]
    line = metrics(run)[-1]
    assert (line["step"], line["weight_version"], line["world_size"], line["optimizer_state"]) == (1, 2, 1, "loaded")
    assert AutoModelForCausalLM.from_pretrained(run.weights_dir(2), dtype=torch.float32) is not None
    # Adam's step counter went on from step 0's state (a fresh optimizer would be at 1).
    state = read_trainer_state(run, version=2, scratch=tmp_path)["optimizer"]["state"]
    assert {int(s["step"]) for s in state.values()} == {2}
    assert not trainer_state_dir(run=run, version=1).exists()
    assert [p.name for p in trainer_state_dir(run=run, version=2).glob("*.distcp")] == ["__0_0.distcp"]


STEP2 = {"e20": ("t3", 1.0), "e21": ("t3", 0.0)}


def test_step2_on_two_ranks_reshards_the_state_one_rank_saved(step0, tiny_model):
    run, _ = step0
    batch = rollouts(tiny_model, tasks=STEP2, seed=20, version=2)
    record_calls(run, batch)
    write_batch(run, step=2, batch=batch)
    done = torchrun_step(run, step=2)  # world size 2 after 1
    assert done.returncode == 0, done.stderr[-4000:]
    line = metrics(run)[-1]
    assert (line["step"], line["world_size"], line["optimizer_state"]) == (2, 2, "loaded")
    assert len(list(trainer_state_dir(run=run, version=3).glob("*.distcp"))) == 2


def test_rerunning_a_committed_step_is_a_no_op(step0):
    run, _ = step0
    before = (run.metrics_file.read_bytes(), (run.weights_dir(1) / "model.safetensors").read_bytes())
    done = train_step(run, step=0)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (run.metrics_file.read_bytes(), (run.weights_dir(1) / "model.safetensors").read_bytes()) == before
    assert [r["step"] for r in metrics(run)].count(0) == 1


def test_a_lost_metrics_line_is_restored_from_the_committed_version(step0):
    run, _ = step0
    kept = [r for r in metrics(run) if r["step"] != 0]
    run.metrics_file.write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert train_step(run, step=0).returncode == 0
    restored = [r for r in metrics(run) if r["step"] == 0]
    assert len(restored) == 1 and restored[0]["world_size"] == 2
