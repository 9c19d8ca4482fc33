"""The step's input from a real run directory, and the in-process gradient proof: packed GRPO
over deduplicated trees (split across micro-batches) equals naive per-path GRPO."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gyrectl.capture.source import load
from gyrectl.capture.store import scan
from gyrectl.capture.tree import build_tree
from gyrectl.config import load_config
from gyrectl.config.schema import DedupConfig
from gyrectl.errors import UserError
from gyrectl.run.batch_file import read_batch_file
from gyrectl.train.batch import build_step_batch, split_groups
from gyrectl.train.step import micro_batch_loss

from naive_paths import sequence, unique_trie_positions
from train_run import TRAINING, make_run, naive_grpo_loss, record_calls, rollouts, write_batch

TASKS = {"e0": ("t0", 1.0), "e1": ("t0", 0.0), "e2": ("t0", 0.25), "e3": ("t1", 0.5)}


@pytest.fixture
def run_and_batch(tmp_path, tiny_model_dir, tiny_model):
    # 120 tokens: every tree is split, with prefixes recomputed (the longest path is 105).
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir,
                   training=dataclasses.replace(TRAINING, micro_batch_tokens=120))
    batch = rollouts(tiny_model, tasks=TASKS, seed=0)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch, without_calls=("e9",))
    return run, batch


def step_batch(run, training=None, **dedup):
    config = load_config(run.config_file)
    if dedup:
        config = dataclasses.replace(config, dedup=DedupConfig(**dedup))
    if training:
        config = dataclasses.replace(config, training=training)
    return build_step_batch(run=run, config=config, batch=read_batch_file(run=run, step=0)), config


def test_the_recorded_trees_have_every_branch_kind(run_and_batch):
    run, _ = run_and_batch
    kinds = {label.kind for execution, calls in load(run.path).calls.items()
             for label in build_tree(execution, calls).labels}
    assert kinds == {"new_context", "continuation", "retry", "parallel_sample"}


def test_counts_advantages_and_a_skipped_execution(run_and_batch):
    run, batch = run_and_batch
    built, _ = step_batch(run)
    records = [r for rollout in batch for r in rollout.records]
    assert built.naive_tokens == sum(len(sequence(r)) for r in records)
    assert built.unique_tokens == sum(unique_trie_positions(list(rollout.records)) for rollout in batch)
    trained = {rollout.execution: len({sequence(r)[:t + 1] for r in rollout.records
                                       for t in range(len(r.prompt_token_ids), len(sequence(r)))})
               for rollout in batch}
    assert built.trained_tokens == sum(trained.values())
    # A file without groups (an older head's) groups by task: t0's three executions, and t1's one
    # (a group of one: no signal)
    assert (built.signal.groups, built.signal.groups_without_signal) == (2, 1)
    assert built.signal.signal_tokens == built.trained_tokens - trained["e3"] > 0
    skipping, _ = step_batch(run, training=dataclasses.replace(TRAINING, skip_uniform_groups=True))
    assert skipping.num_executions == 3 and skipping.trained_tokens == built.signal.signal_tokens
    assert skipping.signal.groups_without_signal == 1  # still reported, though not trained
    assert (built.num_executions, built.num_skipped) == (4, 1)
    assert set(built.rewards) == {"e0", "e1", "e2", "e3", "e9"}
    assert set(built.advantages) == {"e0", "e1", "e2", "e3"} and built.advantages["e3"] == 0.0
    assert built.advantages["e0"] > built.advantages["e2"] > built.advantages["e1"]
    assert len(built.micro_batches) > 4 and not any(m.over_budget for m in built.micro_batches)
    assert built.dedup_ratio == pytest.approx(built.naive_tokens / built.unique_tokens)


def test_a_step_reads_only_its_batchs_records_from_the_capture_store(tmp_path, tiny_model_dir, tiny_model, caplog):
    """The batch's calls sit between other executions' (earlier and later steps'); every byte of
    every record outside the batch is then destroyed. The step's batch is built the same and
    nothing is reported damaged: it read its own records only (through the store's index)."""
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    ours = rollouts(tiny_model, tasks=TASKS, seed=0)
    for batch in (rollouts(tiny_model, tasks={f"early{i}": ("t8", 0.0) for i in range(4)}, seed=5), ours,
                  rollouts(tiny_model, tasks={f"later{i}": ("t9", 0.0) for i in range(4)}, seed=7)):
        record_calls(run, batch)
    write_batch(run, step=0, batch=ours)
    before, _ = step_batch(run)
    data = bytearray(run.calls_store.read_bytes())
    for record in scan(run.calls_store).records:
        if record.call.meta.execution not in TASKS:
            data[record.offset:record.offset + record.length] = b"\xff" * record.length
    run.calls_store.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        after, _ = step_batch(run)
    assert "skipped" not in caplog.text, caplog.text  # a whole read reports the destroyed records
    assert (after.naive_tokens, after.unique_tokens, after.trained_tokens, after.num_executions) == \
        (before.naive_tokens, before.unique_tokens, before.trained_tokens, 4)
    assert after.advantages == before.advantages and len(after.micro_batches) == len(before.micro_batches)


def test_packed_grpo_gradient_equals_naive_per_path_gradient(run_and_batch, tiny_model):
    run, batch = run_and_batch
    built, config = step_batch(run)

    def gradient(loss_fn):
        tiny_model.zero_grad()
        loss = loss_fn()
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in tiny_model.parameters()]).double()
        tiny_model.zero_grad()
        return float(loss.detach()), grad

    loss_p, grad_p = gradient(lambda: sum(
        micro_batch_loss(model=tiny_model, micro=m, advantages=built.advantages, training=config.training,
                         device=torch.device("cpu")).loss for m in built.micro_batches))
    loss_n, grad_n = gradient(lambda: naive_grpo_loss(tiny_model, batch, built.advantages))
    assert abs(loss_p - loss_n) <= 1e-5 * abs(loss_n)
    assert float((grad_p - grad_n).norm() / grad_n.norm()) <= 1e-5


def test_paths_mode_computes_fewer_tokens_and_is_repeatable(run_and_batch):
    run, _ = run_and_batch
    exact, _ = step_batch(run)
    paths, _ = step_batch(run, mode="paths", j_max=2)
    again, _ = step_batch(run, mode="paths", j_max=2)
    assert 0 < paths.trained_tokens < exact.trained_tokens and paths.unique_tokens < exact.unique_tokens
    assert paths.naive_tokens == exact.naive_tokens
    assert [m.input_ids.tolist() for m in paths.micro_batches] == [m.input_ids.tolist() for m in again.micro_batches]


def test_a_run_without_any_recorded_call_skips_everything(tmp_path, tiny_model_dir):
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    run.write_json(run.batch_file(0), {"step": 0, "weights_version": 0, "executions": [
        {"execution": "e0", "task": "t0", "reward": 1.0, "weight_version": 0}]})
    built, _ = step_batch(run)
    assert (built.num_executions, built.num_skipped, len(built.micro_batches)) == (0, 1, 0)


@pytest.mark.parametrize("content, message", [
    (None, "no batch file for step 0"),
    ("{not json", "not valid JSON"),
    ('{"step": 0, "weights_version": 0, "executions": [{"execution": "e0"}]}', "'task'"),
    ('{"step": 3, "weights_version": 3, "executions": []}', "says step 3, expected 0"),
])
def test_a_bad_batch_file_is_a_user_error(tmp_path, tiny_model_dir, content, message):
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    if content is not None:
        run.batch_file(0).write_text(content)
    with pytest.raises(UserError, match=message):
        read_batch_file(run=run, step=0)


def test_mini_batches_hold_whole_groups_in_batch_order():
    groups = {"a": "t", "d": "u", "b": "t", "e": "u", "c": "v"}
    executions = list(groups)
    assert split_groups(executions, groups, parts=1) == [executions]  # one update: the batch as it was
    assert split_groups(executions, groups, parts=2) == [["a", "b"], ["d", "e", "c"]]
    assert split_groups(executions, groups, parts=3) == [["a", "b"], ["d", "e"], ["c"]]
    assert split_groups(executions, groups, parts=9) == [["a", "b"], ["d", "e"], ["c"]]  # no more than groups
    assert split_groups([], {}, parts=2) == [[]]
