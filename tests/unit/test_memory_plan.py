"""``gyrectl plan``: the model's shape, the arithmetic of each part, and the refusal of a config
that does not fit (exit 2, naming the field and showing the sum).

The parameter formula is checked against the modules transformers builds (on the meta device:
no weights) and against the figures the Qwen model cards publish; the rest against the formulas
written out in ``gyrectl.plan.memory``."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from gyrectl.config import load_config
from gyrectl.config.schema import Config, ModelConfig
from gyrectl.plan.memory import GB, memory_plan
from gyrectl.plan.shape import PUBLISHED, model_shape, shape_of_config

EXAMPLE = "configs/example-32nodes.yaml"


@pytest.mark.parametrize("model_type, tied", [("qwen2", False), ("qwen2", True), ("qwen3", False)])
def test_the_parameter_count_is_what_transformers_builds(model_type, tied):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, vocab_size=1000, hidden_size=64, intermediate_size=160,
                                  num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                  tie_word_embeddings=tied)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    shape = shape_of_config(config.to_dict(), name=model_type)
    assert shape.params == sum(p.numel() for p in model.parameters())


# (total, non-embedding) parameters in billions as the model cards state them.
MODEL_CARDS = {"Qwen2.5-0.5B": (0.49, 0.36), "Qwen2.5-1.5B": (1.54, 1.31), "Qwen2.5-7B": (7.61, 6.53),
               "Qwen3-8B": (8.2, 6.95), "Qwen3-32B": (32.8, 31.2)}


@pytest.mark.parametrize("name", MODEL_CARDS)
def test_published_shapes_give_the_model_cards_parameter_counts(name):
    shape = PUBLISHED[name.lower()]
    embeddings = shape.embedding_params * (1 if shape.tied else 2)
    total, non_embedding = MODEL_CARDS[name]
    last_digit = 10.0 ** -len(str(total).split(".")[1])  # the cards round, or cut, to it
    assert abs(shape.params / 1e9 - total) < last_digit
    assert abs((shape.params - embeddings) / 1e9 - non_embedding) < 0.01


def test_qwen3_32b_keeps_256_kib_of_kv_cache_per_token_in_bfloat16():
    # 64 layers x 8 KV heads x 128 x (K and V) x 2 bytes
    assert PUBLISHED["qwen3-32b"].kv_bytes_per_token(2) == 256 * 1024


def test_a_folder_name_finds_its_published_shape_and_a_config_json_wins(tmp_path):
    assert model_shape("/shared/models/Qwen3-32B").name == "Qwen3-32B"
    assert model_shape("/elsewhere/Qwen2.5-7B-Instruct").name == "Qwen2.5-7B"
    assert model_shape("/nowhere/my-model") is None
    folder = tmp_path / "Qwen3-32B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 512}))
    assert model_shape(str(folder)).hidden == 64


def example(**changes) -> Config:
    config = load_config(EXAMPLE)
    for path, value in changes.items():
        section, name = path.split("__")
        config = dataclasses.replace(config,
                                     **{section: dataclasses.replace(getattr(config, section), **{name: value})})
    return config


def test_the_example_fits_and_each_part_is_its_formula():
    config = example()
    shape = PUBLISHED["qwen3-32b"]
    plan = memory_plan(config, shape)
    assert plan.fits, plan.problems
    ranks = 4 * 8  # elastic: the smallest training group is one cell of 4 nodes x 8 GPUs
    p, tokens = shape.params, config.training.micro_batch_tokens
    assert plan.train_ranks == ranks
    # ZeRO's 16 bytes per parameter (float32 weights, gradients, two Adam moments), sharded.
    assert plan.train["parameters"] + plan.train["gradients"] + plan.train["optimizer"] == 16 * p / ranks
    per_layer = 7 * 5120 + 3 * 1024 + 4 * 25600  # values autograd keeps per token and layer
    assert plan.train["activations"] == tokens * 2 * (5120 * 64 + per_layer)  # checkpointing on
    assert plan.train["logits"] == tokens * 151936 * (2 + 8)
    assert plan.serve["weights"] == 2 * p / 8
    assert plan.serve["kv_cache"] == 32 * 32768 * 256 * 1024 / 8  # sessions x max-model-len x KV per token / TP
    assert plan.replicas_per_cell == 4 and plan.gpus_per_replica == 8
    assert plan.host_per_node == max(8 * 2 * p / 8, 8 * 12 * p / ranks)
    no_checkpointing = memory_plan(example(training__activation_checkpointing=False), shape)
    assert no_checkpointing.train["activations"] == tokens * 2 * per_layer * 64


@pytest.mark.parametrize("changes, field, words", [
    ({"training__micro_batch_tokens": 65536}, "training.micro_batch_tokens", "lower it"),
    ({"training__micro_batch_tokens": 65536, "training__activation_checkpointing": False},
     "training.micro_batch_tokens", "or set training.activation_checkpointing"),
    ({"cells__nodes_per_cell": 1, "cluster__gpus_per_node": 1, "model__tensor_parallel": 1},
     "cells.nodes_per_cell", "sharded state alone"),
    ({"model__tensor_parallel": 1, "cluster__gpu_memory_gb": 40.0}, "model.tensor_parallel", "weights alone"),
    ({"rollout__concurrency_per_server": 256}, "rollout.concurrency_per_server", "256 sessions at max-model-len 32768"),
    ({"cluster__mem_per_node_gb": 64}, "rollout.sleep_level", "sleep_level 2"),
])
def test_a_config_too_big_names_the_field_and_shows_the_sum(changes, field, words):
    plan = memory_plan(example(**changes), PUBLISHED["qwen3-32b"])
    assert not plan.fits
    problem = next(p for p in plan.problems if p.field == field)
    assert words in problem.message, problem.message
    assert " GB" in problem.message


def test_without_gpu_memory_the_gpu_checks_are_not_made():
    plan = memory_plan(example(cluster__gpu_memory_gb=0.0, training__micro_batch_tokens=65536), PUBLISHED["qwen3-32b"])
    assert plan.fits and sum(plan.train.values()) > 80 * GB


def test_plan_json_keys(cli):
    result = cli("plan", EXAMPLE, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert list(data) == ["fits", "train", "serve", "host_per_node_gb", "problems", "model"]
    assert list(data["train"]) == ["per_gpu_gb", "ranks", "parts"]
    assert list(data["serve"]) == ["per_gpu_gb", "replicas_per_cell", "gpus_per_replica", "parts"]
    assert data["fits"] is True and data["problems"] == []
    assert data["train"]["per_gpu_gb"] == pytest.approx(sum(data["train"]["parts"].values()), abs=0.01)


@pytest.mark.parametrize("command", [["plan"], ["config", "check"], ["launch", "--dry-run"]])
def test_a_config_too_big_for_its_gpus_exits_2_with_the_arithmetic(cli, command):
    result = cli(*command, EXAMPLE, "--set", "training.micro_batch_tokens=65536")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "training.micro_batch_tokens: a training rank needs" in result.stderr
    assert "parameters 4.095 + gradients 4.095 + optimizer 8.191" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_plan_json_of_a_config_that_does_not_fit_is_still_data(cli):
    result = cli("plan", EXAMPLE, "--json", "--set", "rollout.concurrency_per_server=256")
    assert result.returncode == 2
    data = json.loads(result.stdout)
    assert data["fits"] is False and data["problems"][0]["field"] == "rollout.concurrency_per_server"


def test_an_unknown_model_is_a_user_error_for_plan_not_for_a_config_only_check(cli, tmp_path):
    result = cli("plan", EXAMPLE, "--set", "model.path=/nowhere/my-model")
    assert result.returncode == 2 and "model.path: '/nowhere/my-model' has no config.json" in result.stderr
    assert cli("config", "check", EXAMPLE, "--config-only", "--set", "model.path=/nowhere/my-model").returncode == 0


def test_config_check_json_carries_the_plan(cli, tiny_model_dir):
    data = json.loads(cli("config", "check", EXAMPLE, "--json", "--config-only").stdout)  # its files are on its cluster
    assert data["plan"]["fits"] is True and data["plan"]["serve"]["replicas_per_cell"] == 4
    local = cli("config", "check", "configs/local-tiny.yaml", "--json", "--set", f"model.path={tiny_model_dir}")
    assert json.loads(local.stdout)["plan"]["model"]["params"] == 1_344_640  # read from the tiny model's config.json


def test_a_cpu_config_sums_both_roles_into_host_memory():
    config = Config(model=ModelConfig(path="tiny", dtype="float32"))
    shape = PUBLISHED["qwen2.5-0.5b"]
    plan = memory_plan(config, shape)
    assert plan.host_per_node == sum(plan.train.values()) + sum(plan.serve.values())
    assert plan.train["attention_mask"] == config.training.micro_batch_tokens ** 2  # dense bool mask on CPU


def test_plan_of_a_cpu_config_says_host_memory_per_process_not_per_gpu(cli, tiny_model_dir):
    args = ("plan", "configs/local-tiny.yaml", "--set", f"model.path={tiny_model_dir}")  # gpus_per_node: 0
    result = cli(*args, env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert "GB of host memory per process (no GPUs)" in result.stdout and "total per process" in result.stdout
    assert "GPU(s)" not in result.stdout and "per GPU" not in result.stdout
    data = json.loads(cli(*args, "--json").stdout)
    assert list(data) == ["fits", "train", "serve", "host_per_node_gb", "problems", "model"]
    check = cli("config", "check", *args[1:], "--config-only", env={"COLUMNS": "200"})
    assert "memory plan (no GPUs): training rank" in check.stdout and "GB per process" in check.stdout
    assert "per GPU" not in check.stdout
