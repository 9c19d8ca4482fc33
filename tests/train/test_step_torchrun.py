"""The training step as the coordinator runs it: ``torchrun --nproc_per_node=2 -m gyrectl.train``
(gloo, FSDP2) on a real run directory, checked against naive per-path GRPO computed here.

Step 0 runs once per module (a torchrun start costs seconds on two cores); the tests then read
what it wrote, run step 1 as a plain process and step 2 on two ranks again (the world size
changes both ways: DCP reshards the optimizer state each rank wrote) and re-run step 0 (a no-op)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records
from gyrectl.train.checkpoint import trainer_state_dir
from gyrectl.train.grpo import group_advantages

from train_run import (
    TRAINING,
    make_run,
    naive_grpo_loss,
    read_trainer_state,
    read_weights,
    record_calls,
    rollouts,
    torchrun_step,
    train_step,
    write_batch,
)

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


def test_each_rank_wrote_its_own_file_of_the_weights_and_rank_0_the_index(step0, tiny_model):
    run, _ = step0
    folder = run.weights_dir(1)
    files = sorted(p.name for p in folder.glob("*.safetensors"))
    assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    names = set(tiny_model.state_dict())
    assert set(index["weight_map"]) == names and set(index["weight_map"].values()) == set(files)
    sizes = {}
    for name in files:
        tensors = load_file(str(folder / name))
        assert {n for n, f in index["weight_map"].items() if f == name} == set(tensors)  # each tensor once
        sizes[name] = sum(t.numel() * t.element_size() for t in tensors.values())
    assert index["metadata"]["total_size"] == sum(sizes.values())
    assert max(sizes.values()) < 0.6 * sum(sizes.values())  # spread over both ranks, not all on one
    assert not list(run.checkpoints_dir.glob(".v*.tmp*"))


def test_v1_is_an_hf_folder_one_adamw_step_from_v0(step0, tiny_model, tiny_model_dir):
    run, batch = step0
    v1 = AutoModelForCausalLM.from_pretrained(run.weights_dir(1), dtype=torch.float32)
    AutoTokenizer.from_pretrained(run.weights_dir(1))
    assert not v1.config.tie_word_embeddings
    saved = read_weights(run.weights_dir(1))
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


def write_step1(run, tiny_model) -> None:
    batch = rollouts(tiny_model, tasks=STEP1, seed=10, version=1)
    record_calls(run, batch)
    write_batch(run, step=1, batch=batch)


@pytest.fixture(scope="module")
def step0_copy(step0, tmp_path_factory) -> RunDir:
    """The run as step 0 left it, taken before a test trains step 1 on it."""
    run, _ = step0
    return RunDir(shutil.copytree(run.path, tmp_path_factory.mktemp("copy") / "run"))


def test_step1_on_another_world_size_loads_the_optimizer_state(step0, step0_copy, tiny_model, tmp_path):
    run, _ = step0
    write_step1(run, tiny_model)
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


def step1_update(run) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(v2, v2 - v1): the weights step 1 produced and the update it made."""
    v1, v2 = read_weights(run.weights_dir(1)), read_weights(run.weights_dir(2))
    return v2, {name: v2[name] - v1[name] for name in v2}


def assert_same_next_weights(resharded, same_size) -> None:
    """Within 1e-6 of each other: the steps differ only in how their gradients were summed
    (fp32 rounding, ~1e-7 of an update of lr=1e-3); a state restored wrongly or not at all moves
    weights by about lr."""
    (weights, update), (weights_ref, update_ref) = step1_update(resharded), step1_update(same_size)
    assert max(float((weights[n] - weights_ref[n]).abs().max()) for n in weights) <= 1e-6
    moved = torch.cat([u.flatten() for u in update.values()])
    expected = torch.cat([update_ref[n].flatten() for n in update])
    assert float((moved - expected).norm() / expected.norm()) <= 1e-3


def test_step1_resumed_on_one_rank_from_two_gives_the_weights_of_two(step0, step0_copy, tiny_model):
    """Saved at world size 2, resumed at 1 (the test above) vs resumed at 2."""
    run, _ = step0
    same_size = step0_copy
    write_step1(same_size, tiny_model)
    done = torchrun_step(same_size, step=1)
    assert done.returncode == 0, done.stderr[-4000:]
    assert metrics(same_size)[-1]["world_size"] == 2 and metrics(run)[1]["world_size"] == 1
    assert_same_next_weights(run, same_size)


def test_step1_resumed_on_two_ranks_from_one_gives_the_weights_of_one(tiny_model, tiny_model_dir, tmp_path):
    """Step 0 on one rank; step 1 on two vs on one."""
    run = make_run(tmp_path / "resharded", tiny_model_dir=tiny_model_dir,
                   training=dataclasses.replace(TRAINING, micro_batch_tokens=BUDGET))
    batch = rollouts(tiny_model, tasks=STEP0, seed=0)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    assert train_step(run, step=0).returncode == 0
    write_step1(run, tiny_model)
    same_size = RunDir(shutil.copytree(run.path, tmp_path / "same-size"))
    for _target, done in ((run, torchrun_step(run, step=1)), (same_size, train_step(same_size, step=1))):
        assert done.returncode == 0, done.stderr[-4000:]
    assert [line["world_size"] for line in metrics(run)] == [1, 2]
    assert [line["world_size"] for line in metrics(same_size)] == [1, 1]
    assert_same_next_weights(run, same_size)


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


def folder_bytes(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_rerunning_a_committed_step_is_a_no_op(step0):
    run, _ = step0
    before = (run.metrics_file.read_bytes(), folder_bytes(run.weights_dir(1)))
    done = train_step(run, step=0)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (run.metrics_file.read_bytes(), folder_bytes(run.weights_dir(1))) == before
    assert [r["step"] for r in metrics(run)].count(0) == 1


def test_a_lost_metrics_line_is_restored_from_the_committed_version(step0):
    run, _ = step0
    kept = [r for r in metrics(run) if r["step"] != 0]
    run.metrics_file.write_text("".join(json.dumps(r) + "\n" for r in kept))
    assert train_step(run, step=0).returncode == 0
    restored = [r for r in metrics(run) if r["step"] == 0]
    assert len(restored) == 1 and restored[0]["world_size"] == 2
