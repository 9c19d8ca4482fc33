"""The regularisers' configuration (issue 27, item 5) around the step: the config checks, the
launch checks and link of ``training.kl_reference``, which folder the trainer loads as the
reference (and when a resident trainer must load another), and what ``gyrectl plan`` counts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from gyrectl.config import load_config, parse_config
from gyrectl.config.schema import Config, ModelConfig, TrainingConfig
from gyrectl.errors import ConfigError, UserError
from gyrectl.launch.preflight import _check_kl_reference
from gyrectl.plan.memory import GB, memory_plan
from gyrectl.plan.shape import PUBLISHED
from gyrectl.run.rundir import RunDir
from gyrectl.train.reference import Reference, reference_folder
from tests.conftest import REPO

# ---- config ------------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["entropy_coef", "kl_coef"])
def test_a_negative_coefficient_is_refused_naming_the_field(field):
    with pytest.raises(ConfigError) as info:
        parse_config({"training": {field: -0.01}})
    assert info.value.path == f"training.{field}" and "must be at least 0" in str(info.value)


def test_an_estimator_without_a_kl_coefficient_is_fine_and_a_wrong_one_is_refused():
    config = parse_config({"training": {"kl_estimator": "k1", "kl_reference": "nowhere"}})
    assert (config.training.kl_coef, config.training.kl_estimator) == (0.0, "k1")
    with pytest.raises(ConfigError) as info:
        parse_config({"training": {"kl_estimator": "k2"}})
    assert info.value.path == "training.kl_estimator"


def model_folder(path: Path, vocab: int = 4096) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", "vocab_size": vocab}))
    return path


def with_training(**training) -> Config:
    return Config(model=ModelConfig(path="models/policy"), training=TrainingConfig(**training))


def test_the_launch_checks_refuse_a_missing_or_foreign_reference_naming_the_field(tmp_path):
    model_folder(tmp_path / "models/policy")
    model_folder(tmp_path / "models/base")
    model_folder(tmp_path / "models/other", vocab=32000)
    _check_kl_reference(with_training(kl_coef=0.1, kl_reference="models/base"), tmp_path)
    _check_kl_reference(with_training(kl_coef=0.1), tmp_path)  # v0 = model.path, checked as such
    _check_kl_reference(with_training(kl_coef=0.0, kl_reference="models/nope"), tmp_path)  # ignored
    with pytest.raises(UserError, match=r"^training.kl_reference: .*models/nope is not an HF model folder"):
        _check_kl_reference(with_training(kl_coef=0.1, kl_reference="models/nope"), tmp_path)
    with pytest.raises(UserError, match=r"^training.kl_reference: .* vocabulary of 32000 tokens .* 4096"):
        _check_kl_reference(with_training(kl_coef=0.1, kl_reference="models/other"), tmp_path)


def test_the_reference_folder_is_v0_unless_named_and_none_without_kl(tmp_path):
    run = RunDir.create(tmp_path, "run")
    model_folder(run.weights_dir(0))
    base = model_folder(tmp_path / "base")
    assert reference_folder(run, TrainingConfig()) is None
    assert reference_folder(run, TrainingConfig(kl_coef=0.1)) == run.weights_dir(0).resolve()
    assert reference_folder(run, TrainingConfig(kl_coef=0.1, kl_reference=str(base))) == base.resolve()
    run.reference_dir.symlink_to(base)  # as the launch links it: wherever the trainer starts
    assert reference_folder(run, TrainingConfig(kl_coef=0.1, kl_reference="base")) == base.resolve()


def test_a_resident_trainer_reloads_when_the_reference_it_needs_changes(tmp_path):
    from gyrectl.train.resident import _holds
    from gyrectl.train.step import Trainer

    run = RunDir.create(tmp_path, "run")
    model_folder(run.weights_dir(0))
    plain = Config(model=ModelConfig(dtype="float32"))
    with_kl = dataclasses.replace(plain, training=TrainingConfig(kl_coef=0.1))
    trainer = Trainer(world=None, model=None, optimizer=None, version=3, dtype=torch.float32)
    assert _holds(trainer, run=run, step=3, config=plain)
    assert not _holds(trainer, run=run, step=3, config=with_kl)  # it has none: load one
    trainer.reference = Reference(model=None, folder=run.weights_dir(0).resolve())
    assert _holds(trainer, run=run, step=3, config=with_kl)
    assert not _holds(trainer, run=run, step=3, config=plain)  # the penalty is off now: free it
    other = dataclasses.replace(plain, training=TrainingConfig(kl_coef=0.1, kl_reference=str(tmp_path)))
    assert not _holds(trainer, run=run, step=3, config=other)


# ---- gyrectl plan ------------------------------------------------------------------------------

def example_with(**training):
    config = load_config(REPO / "configs/example-32nodes.yaml")
    return dataclasses.replace(config, training=dataclasses.replace(config.training, **training))


def test_the_plan_counts_the_reference_and_the_entropy_gradient():
    shape = PUBLISHED["qwen3-32b"]
    plain, with_kl = memory_plan(example_with(), shape), memory_plan(example_with(kl_coef=0.001), shape)
    both = memory_plan(example_with(kl_coef=0.001, entropy_coef=0.01), shape)
    ranks, tokens = plain.train_ranks, example_with().training.micro_batch_tokens
    assert "reference" not in plain.train  # no part for what is not loaded: the JSON keys as before
    assert list(with_kl.train)[:4] == ["parameters", "gradients", "optimizer", "reference"]
    assert with_kl.train["reference"] == 2 * shape.params / ranks  # bfloat16, sharded like the policy
    assert {k: v for k, v in with_kl.train.items() if k != "reference"} == plain.train
    assert both.train["logits"] - with_kl.train["logits"] == 4 * tokens * shape.vocab  # the entropy's gradient
    # An offloaded resident trainer takes its reference to host memory too.
    gpus = example_with().cluster.gpus_per_node
    assert with_kl.host_per_node - plain.host_per_node == pytest.approx(gpus * 2 * shape.params / ranks)
    assert with_kl.to_json()["train"]["parts"]["reference"] == pytest.approx(2 * shape.params / ranks / GB, abs=1e-3)


def test_a_reference_too_big_for_its_gpus_is_named_in_the_sum():
    config = example_with(kl_coef=0.001)
    config = dataclasses.replace(config, cells=dataclasses.replace(config.cells, nodes_per_cell=1),
                                 cluster=dataclasses.replace(config.cluster, gpus_per_node=1),
                                 model=dataclasses.replace(config.model, tensor_parallel=1))
    problem = next(p for p in memory_plan(config, PUBLISHED["qwen3-32b"]).problems if p.field == "cells.nodes_per_cell")
    assert "optimizer 262.097 + reference 65.524 + gathered_weights" in problem.message, problem.message
    assert "sharded state alone (589.718 GB: 16 + 2 bytes x 32,762,123,264 parameters / 1 GPUs)" in problem.message


def test_the_launch_links_the_named_reference_into_the_run(tmp_path):
    from gyrectl.launch.loop import _link_initial_weights

    run = RunDir.create(tmp_path / "runs", "run")
    for name in ("policy", "base", "other"):
        model_folder(tmp_path / "models" / name)
    _link_initial_weights(run, with_training(kl_coef=0.1, kl_reference="models/base"), tmp_path)
    assert run.reference_dir.resolve() == (tmp_path / "models/base").resolve()
    assert run.weights_dir(0).resolve() == (tmp_path / "models/policy").resolve()
    _link_initial_weights(run, with_training(kl_coef=0.1, kl_reference="models/other"), tmp_path)  # a resume
    assert run.reference_dir.resolve() == (tmp_path / "models/other").resolve()
    assert reference_folder(run, TrainingConfig(kl_coef=0.1, kl_reference="models/other")) == \
        (tmp_path / "models/other").resolve()
