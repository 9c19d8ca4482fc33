"""The step with the entropy bonus and the KL penalty (issue 27, item 5), in this process (a group
of one, each step a fresh trainer as a process of its own would be): the metrics show ``entropy``
and ``kl_ref``, the reference is v0 (so step 0's ``kl_ref`` is 0), and the gradient of each step
equals the naive per-path gradient of the GRPO loss plus the two terms, written here with the
reference as a plain HF model. With the defaults the micro-batch loss is the policy term's
tensor, bit for bit."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time

import pytest
import torch
from transformers import AutoModelForCausalLM

from gyrectl.config import dump_config, load_config
from gyrectl.run.batch_file import read_batch_file
from gyrectl.run.files import write_train_request
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records
from gyrectl.train.batch import build_step_batch
from gyrectl.train.forward import target_logprobs
from gyrectl.train.grpo import group_advantages, policy_loss, token_advantages
from gyrectl.train.packed import packed_tensors
from gyrectl.train.regularizers import kl_estimate
from gyrectl.train.step import micro_batch_loss, run_step

from naive_paths import root_to_leaf_paths, trainable_positions
from train_run import (
    TRAINING,
    make_run,
    naive_grpo_loss,
    record_calls,
    resident_log,
    resident_step,
    rollouts,
    torchrun_step,
    train_step,
    write_batch,
)

KNOBS = dict(entropy_coef=0.01, kl_coef=0.5, kl_estimator="k1")
TASKS = [{"a0": ("t", 1.0), "b0": ("t", 0.0), "c0": ("u", 0.5), "d0": ("u", 0.0)},
         {"a1": ("t", 0.0), "b1": ("t", 1.0), "c1": ("u", 0.75), "d1": ("u", 0.5)}]


def naive_regularizers(policy, reference, batch, training):
    """``-entropy_coef x mean H + kl_coef x mean k`` over every (path, sampled token) pair, every
    path its own causal forward through the policy and the reference."""
    entropy, kl = [], []
    for rollout in batch:
        for path in root_to_leaf_paths(list(rollout.records)):
            positions = torch.tensor(trainable_positions(path, list(rollout.records)))
            ids = torch.tensor(path)[None]
            rows = torch.log_softmax(policy(input_ids=ids).logits[0].float(), -1)[positions - 1]
            with torch.no_grad():
                ref_rows = torch.log_softmax(reference(input_ids=ids).logits[0].float(), -1)[positions - 1]
            tokens, index = ids[0, positions], torch.arange(len(positions))
            entropy.append(-(rows.exp() * rows).sum(-1))
            kl.append(kl_estimate(rows[index, tokens], ref_rows[index, tokens], training.kl_estimator))
    return -training.entropy_coef * torch.cat(entropy).mean() + training.kl_coef * torch.cat(kl).mean()


def naive_grad_norm(policy, reference, batch, training) -> float:
    advantages = group_advantages(rewards={r.execution: r.reward for r in batch},
                                  groups={r.execution: r.task for r in batch}, estimator=training.advantage)
    policy.zero_grad()
    (naive_grpo_loss(policy, batch, advantages, training) + naive_regularizers(policy, reference, batch,
                                                                               training)).backward()
    return float(torch.cat([p.grad.flatten() for p in policy.parameters()]).double().norm())


def test_a_step_with_entropy_and_kl_logs_both_and_equals_the_naive_gradient(tmp_path, tiny_model_dir, tiny_model):
    training = dataclasses.replace(TRAINING, **KNOBS)
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir, training=training)
    lines = []
    for step, tasks in enumerate(TASKS):
        batch = rollouts(tiny_model, tasks=tasks, seed=step, version=step)
        record_calls(run, batch)
        write_batch(run, step=step, batch=batch)
        lines.append(run_step(run=run, step=step))
        # The naive reference at the weights the step trained (v0, then v1), against v0.
        policy = AutoModelForCausalLM.from_pretrained(run.weights_dir(step), dtype=torch.float32,
                                                      attn_implementation="sdpa").eval()
        assert lines[-1]["grad_norm"] == pytest.approx(naive_grad_norm(policy, tiny_model, batch, training), rel=1e-5)
    first, second = lines
    assert first["entropy"] > 1.0 and second["entropy"] > 1.0  # nats; a random 4096-token model is near uniform
    assert abs(first["kl_ref"]) < 1e-6  # the policy is v0, the reference too
    assert second["kl_ref"] != pytest.approx(0.0, abs=1e-4)  # the policy moved, the reference stayed
    assert "load_reference" in first["memory_gb"] or not first["memory_gb"]  # a span where memory is read
    recorded = list(read_records(run.metrics_file))
    assert [r["entropy"] for r in recorded] == [first["entropy"], second["entropy"]]
    assert [r["kl_ref"] for r in recorded] == [first["kl_ref"], second["kl_ref"]]


@pytest.mark.torchrun
def test_two_ranks_shard_the_reference_and_give_the_same_step(tmp_path, tiny_model_dir, tiny_model):
    """torchrun, two gloo ranks, three micro-batches (one rank pads with a zero-weight pass, which
    runs the reference's forward too, so its collectives pair up): the naive gradient still."""
    training = dataclasses.replace(TRAINING, micro_batch_tokens=400, **KNOBS)
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir, training=training)
    batch = rollouts(tiny_model, tasks=TASKS[0], seed=0)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    done = torchrun_step(run, step=0)
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = read_records(run.metrics_file)
    assert line["world_size"] == 2 and line["micro_batches"] == 3
    assert line["grad_norm"] == pytest.approx(naive_grad_norm(tiny_model, tiny_model, batch, training), rel=1e-5)
    assert line["kl_ref"] == 0.0 and line["entropy"] > 1.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_reference_scores_v0_as_the_policy_does(tmp_path, tiny_model_dir, tiny_model, dtype):
    """The reference is kept in the compute dtype, the policy's float32 master weights are cast to
    it for the forward: at step 0 both are v0, and k3 is 0 to the last bit."""
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir,
                   training=dataclasses.replace(TRAINING, kl_coef=0.1, kl_estimator="k3"))
    config = load_config(run.config_file)
    run.config_file.write_text(dump_config(dataclasses.replace(config, model=dataclasses.replace(config.model,
                                                                                                 dtype=dtype))))
    batch = rollouts(tiny_model, tasks=TASKS[0], seed=0)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    assert run_step(run=run, step=0)["kl_ref"] == 0.0


def test_the_defaults_leave_the_micro_batch_loss_bit_for_bit(tmp_path, tiny_model_dir, tiny_model):
    """entropy_coef 0 and kl_coef 0: the loss is the policy term's tensor (the entropy measured
    without a graph), its gradient the same bits as the step before issue 27's item 5."""
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir, training=dataclasses.replace(TRAINING,
                                                                                         micro_batch_tokens=120))
    batch = rollouts(tiny_model, tasks=TASKS[0], seed=3)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    config = load_config(run.config_file)
    built = build_step_batch(run=run, config=config, batch=read_batch_file(run=run, step=0))
    training = config.training
    assert (training.entropy_coef, training.kl_coef) == (0.0, 0.0)

    def before(micro):  # the step's micro-batch loss as it was written before
        tensors = packed_tensors(micro)
        targets = torch.nonzero(tensors["loss_weight"] != 0).flatten()
        advantage = token_advantages(execution_index=tensors["execution_index"], executions=micro.executions,
                                     advantages=built.advantages)
        return policy_loss(logprob=target_logprobs(tiny_model, tensors, targets),
                           behaviour_logprob=tensors["behaviour_logprob"][targets], advantage=advantage[targets],
                           loss_weight=tensors["loss_weight"][targets], clip_eps=training.clip_eps,
                           max_importance_weight=training.max_importance_weight).loss

    def now(micro):
        out = micro_batch_loss(model=tiny_model, micro=micro, advantages=built.advantages, training=training,
                               device=torch.device("cpu"))
        assert out.regularizers.entropy > 0 and out.regularizers.kl_ref is None
        return out.loss

    for micro in built.micro_batches:
        losses, grads = [], []
        for loss_fn in (before, now):
            tiny_model.zero_grad()
            loss = loss_fn(micro)
            loss.backward()
            losses.append(loss.detach())
            grads.append([p.grad.clone() for p in tiny_model.parameters()])
        assert torch.equal(losses[0], losses[1])
        assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    tiny_model.zero_grad()


def wait_for_step(run: RunDir, step: int, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not any(r["step"] == step for r in read_records(run.metrics_file)):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            pytest.fail(f"the trainer exited or timed out:\n{resident_log(run, group='g1').read_text()[-4000:]}")
        time.sleep(0.2)


def test_a_resident_trainer_keeps_the_reference_across_steps(tmp_path, tiny_model_dir, tiny_model):
    """Step 1 on the trainer kept in memory (its reference v0 loaded once, at step 0) gives what a
    fresh process gives from the committed checkpoint: the same loss, entropy and kl_ref."""
    run = make_run(tmp_path / "resident", tiny_model_dir=tiny_model_dir,
                   training=dataclasses.replace(TRAINING, **KNOBS))
    for step, tasks in enumerate(TASKS):
        batch = rollouts(tiny_model, tasks=tasks, seed=step, version=step)
        record_calls(run, batch)
        write_batch(run, step=step, batch=batch)
    trainer = resident_step(run, step=0, group="g1")
    wait_for_step(run, 0, trainer)
    fresh = RunDir(shutil.copytree(run.path, tmp_path / "fresh" / "run", symlinks=True))
    write_train_request(run, 1, "g1")
    wait_for_step(run, 1, trainer)
    run.stop_file.touch()
    code, err = trainer.wait(timeout=60), resident_log(run, group="g1").read_text()
    assert code == 0 and "Traceback" not in err, err[-4000:]
    done = train_step(fresh, step=1)
    assert done.returncode == 0, done.stderr[-4000:]
    reused, again = list(read_records(run.metrics_file))[1], list(read_records(fresh.metrics_file))[1]
    assert (reused["trainer"], again["trainer"]) == ("reused", "started")
    assert "load_reference" not in reused["memory_gb"]  # loaded once, at step 0
    for key in ("loss", "entropy", "kl_ref", "grad_norm"):
        assert reused[key] == pytest.approx(again[key], rel=1e-6), key
    assert reused["kl_ref"] != pytest.approx(0.0, abs=1e-4)
