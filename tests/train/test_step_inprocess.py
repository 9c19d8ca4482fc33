"""The step run in this process (a group of one): user errors, and float32 master weights that
survive a bfloat16 checkpoint between steps."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gyrectl.config import dump_config, load_config
from gyrectl.errors import UserError
from gyrectl.store.jsonl import read_records
from gyrectl.train.step import run_step

from train_run import (
    TRAINING,
    make_run,
    read_trainer_state,
    read_weights,
    record_calls,
    rollouts,
    train_step,
    write_batch,
)


def test_missing_weights_are_a_user_error(tmp_path, tiny_model_dir):
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    run.write_json(run.batch_file(3), {"step": 3, "weights_version": 3, "executions": []})
    with pytest.raises(UserError, match="no weights version 3"):
        run_step(run=run, step=3)


def test_the_cli_exits_2_with_a_readable_message_without_a_batch_file(tmp_path, tiny_model_dir):
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    done = train_step(run, step=0)
    assert done.returncode == 2
    assert "no batch file for step 0" in done.stderr and "Traceback" not in done.stderr


def test_bfloat16_checkpoints_keep_float32_master_weights(tmp_path, tiny_model_dir, tiny_model):
    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    config = load_config(run.config_file)
    run.config_file.write_text(dump_config(dataclasses.replace(
        config, model=dataclasses.replace(config.model, dtype="bfloat16"),
        training=dataclasses.replace(config.training, lr=1e-6))))
    for step in (0, 1):
        batch = rollouts(tiny_model, tasks={f"a{step}": ("t", 1.0), f"b{step}": ("t", 0.0)}, seed=step)
        record_calls(run, batch)
        write_batch(run, step=step, batch=batch)
        run_step(run=run, step=step)
        if step == 0:
            master1 = read_trainer_state(run, version=1, scratch=tmp_path)["model"]
    master2 = read_trainer_state(run, version=2, scratch=tmp_path)["model"]
    v1 = read_weights(run.weights_dir(1))
    assert v1["lm_head.weight"].dtype == torch.bfloat16
    assert all(torch.equal(v1[k], master1[k].to(torch.bfloat16)) for k in v1)  # the folder is the rounding
    # Step 1 went on from the float32 weights: every entry moved by about lr, none by a rounding
    # step of bfloat16 (~1e-4 here), which reloading the folder would have cost.
    assert max(float((master2[k] - master1[k]).abs().max()) for k in master1) < 1e-5
    assert [r["optimizer_state"] for r in read_records(run.metrics_file)] == ["fresh", "loaded"]


def tied_copy(source, out):
    """The tiny model with its LM head tied to the embeddings (as Qwen2.5-0.5B ships): the folder
    holds the embedding only."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(source)
    config.tie_word_embeddings = True
    weights = {k: v for k, v in read_weights(source).items() if k != "lm_head.weight"}
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(weights, strict=False)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    assert "lm_head.weight" not in read_weights(out)
    return out


def test_a_tied_head_is_read_and_written_once_as_the_embedding(tmp_path, tiny_model_dir, tiny_model):
    from transformers import AutoModelForCausalLM

    run = make_run(tmp_path, tiny_model_dir=tied_copy(tiny_model_dir, tmp_path / "tied"))
    for step in (0, 1):  # step 1 loads the folder step 0 wrote
        batch = rollouts(tiny_model, tasks={f"a{step}": ("t", 1.0), f"b{step}": ("t", 0.0)}, seed=step)
        record_calls(run, batch)
        write_batch(run, step=step, batch=batch)
        run_step(run=run, step=step)
    v0, v1, v2 = (read_weights(run.weights_dir(v)) for v in (0, 1, 2))
    assert set(v1) == set(v2) == set(v0) and "lm_head.weight" not in v2
    assert not torch.equal(v1["model.embed_tokens.weight"], v2["model.embed_tokens.weight"])
    reloaded = AutoModelForCausalLM.from_pretrained(run.weights_dir(2), dtype=torch.float32)
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight
    assert torch.equal(reloaded.model.embed_tokens.weight, v2["model.embed_tokens.weight"])


def test_a_folder_missing_a_tensor_is_a_user_error_naming_it(tmp_path, tiny_model_dir, tiny_model):
    from safetensors.torch import save_file

    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    weights = read_weights(run.weights_dir(0))
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, str(run.weights_dir(0) / "model.safetensors"))
    batch = rollouts(tiny_model, tasks={"a": ("t", 1.0), "b": ("t", 0.0)}, seed=0)
    record_calls(run, batch)
    write_batch(run, step=0, batch=batch)
    with pytest.raises(UserError, match=r"lack 1 of the model's tensors \(model.layers.1.mlp.up_proj.weight\)"):
        run_step(run=run, step=0)


def test_activation_checkpointing_gives_the_same_step(tmp_path, tiny_model_dir, tiny_model):
    """Recomputing each layer's activations in the backward pass changes memory, not the step."""
    lines, weights = [], []
    for checkpointing in (False, True):
        run = make_run(tmp_path / str(checkpointing), tiny_model_dir=tiny_model_dir,
                       training=dataclasses.replace(TRAINING, activation_checkpointing=checkpointing))
        batch = rollouts(tiny_model, tasks={"a": ("t", 1.0), "b": ("t", 0.0), "c": ("u", 0.5)}, seed=4)
        record_calls(run, batch)
        write_batch(run, step=0, batch=batch)
        lines.append(run_step(run=run, step=0))
        weights.append(read_weights(run.weights_dir(1)))
    plain, recomputed = weights
    assert max(float((recomputed[k] - plain[k]).abs().max()) for k in plain) <= 1e-6
    assert lines[0]["grad_norm"] == pytest.approx(lines[1]["grad_norm"], rel=1e-6)
    assert lines[0]["loss"] == pytest.approx(lines[1]["loss"], rel=1e-6)


def test_with_activation_checkpointing_each_layer_runs_again_in_the_backward_pass(tmp_path, tiny_model_dir):
    from gyrectl.train.distributed import close_world, init_world
    from gyrectl.train.policy_load import empty_policy, load_policy

    run = make_run(tmp_path, tiny_model_dir=tiny_model_dir)
    world = init_world()
    try:
        runs = []
        for checkpointing in (False, True):
            model = load_policy(empty_policy(run=run, version=0, device=world.device), run=run, version=0,
                                world=world, compute_dtype=torch.float32, activation_checkpointing=checkpointing)
            calls = []  # a pre-hook: a recompute stops as soon as it has what the backward needs
            # B023: the hook is on this iteration's model, which runs before ``calls`` is rebound
            model.model.layers[0].mlp.register_forward_pre_hook(lambda *_: calls.append(1))  # noqa: B023
            model(input_ids=torch.arange(16)[None], use_cache=False).logits.sum().backward()
            runs.append(len(calls))
        assert runs == [1, 2]
    finally:
        close_world()
