"""Config loading: the shipped configs validate; bad configs fail with exit 2 and a message that
names the field (and shows the arithmetic), never a traceback."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from gyrectl.config import dump_config, load_config, parse_config
from gyrectl.config.checks import parse_time_limit_s
from gyrectl.errors import ConfigError
from tests.conftest import REPO

SHIPPED = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path) -> None:
    config = load_config(path)
    assert config.num_cells >= 1


def test_required_configs_are_shipped() -> None:
    names = {p.name for p in SHIPPED}
    assert {"local-tiny.yaml", "slurm-local.yaml", "example-32nodes.yaml"} <= names
    example = load_config(REPO / "configs/example-32nodes.yaml")
    assert (example.cluster.nodes, example.cluster.gpus_per_node, example.cells.nodes_per_cell) == (32, 8, 4)


def test_resolved_config_round_trips() -> None:
    config = load_config(REPO / "configs/slurm-local.yaml")
    assert parse_config(yaml.safe_load(dump_config(config))) == config


def test_set_overrides_a_field_and_is_validated() -> None:
    config = load_config(REPO / "configs/slurm-local.yaml",
                         ["cluster.nodes=8", "run.name=other", "cluster.head.cpus=3"])
    assert (config.cluster.nodes, config.run.name, config.cluster.head.cpus) == (8, "other", 3)
    with pytest.raises(ConfigError) as info:
        load_config(REPO / "configs/slurm-local.yaml", ["cluster.nodes=many"])
    assert info.value.path == "cluster.nodes"
    # YAML 1.1 reads 1e-2 (no dot) as a string; a float field takes it as the number it is.
    assert load_config(REPO / "configs/local-tiny.yaml", ["training.lr=1e-2"]).training.lr == 0.01


@pytest.mark.parametrize("text,seconds", [("30", 1800), ("01:00:00", 3600), ("10:30", 630),
                                          ("2-00:00:00", 172800), ("1-12", 129600)])
def test_slurm_time_formats(text: str, seconds: int) -> None:
    assert parse_time_limit_s(text) == seconds


# (override or YAML snippet, field path the message must name, text the message must hold)
BAD_CONFIGS = [
    ({"cluster": {"nodes": "four"}}, "cluster.nodes", "expected an integer"),
    ({"cluster": {"gpus": 8}}, "cluster.gpus", "gpus_per_node"),  # unknown key lists the valid ones
    ({"clutser": {}}, "clutser", "did you mean 'cluster'"),
    ({"cluster": {"backend": "k8s"}}, "cluster.backend", "'local', 'slurm'"),
    ({"cluster": {"nodes": 6, "gpus_per_node": 8}, "cells": {"nodes_per_cell": 4}}, "cells.nodes_per_cell",
     "6 % 4 = 2"),
    ({"cluster": {"nodes": 4, "gpus_per_node": 8}, "cells": {"nodes_per_cell": 1},
      "model": {"tensor_parallel": 16}}, "cells.nodes_per_cell", "cannot host model.tensor_parallel=16"),
    ({"cluster": {"nodes": 4, "gpus_per_node": 8}, "model": {"tensor_parallel": 3}}, "model.tensor_parallel",
     "multiple of tensor_parallel x pipeline_parallel = 3"),
    ({"cluster": {"time_limit": "soon"}}, "cluster.time_limit", "not a Slurm time"),
    ({"run": {"name": "my run/x"}}, "run.name", "letters, digits"),
    ({"training": {"batch_executions": 10}, "rollout": {"executions_per_task": 4}}, "training.batch_executions",
     "10 % 4 = 2"),
    ({"training": {"lr": -1}}, "training.lr", "must be positive"),
    ({"scheduler": {"policy": "async", "async_train_cells": 4}, "cluster": {"nodes": 4}},
     "scheduler.async_train_cells", "4 training cell(s) of 4"),
    ({"rollout": {"execution_time_limit_s": 7200}, "cluster": {"time_limit": "01:00:00"}},
     "rollout.execution_time_limit_s", "3600 s"),
    ({"cluster": {"extra_sbatch": "--exclusive"}}, "cluster.extra_sbatch", "expected a list"),
    ({"cluster": {"extra_sbatch": ["#SBATCH --exclusive"]}}, "cluster.extra_sbatch[0]", "without '#SBATCH'"),
    ({"cluster": {"nodes": 0}}, "cluster.nodes", "at least 1"),
    ({"cluster": {"gpus_per_node": 0}, "model": {"tensor_parallel": 2}}, "model.tensor_parallel", "CPU only"),
    ({"dedup": {"mode": "fuzzy"}}, "dedup.mode", "'exact', 'paths'"),
    ({"rollout": {"verifier": "verifier.score"}}, "rollout.verifier", "not FILE.py:FUNCTION"),
    ({"rollout": {"harness_command": ["python", "agent.py"], "verifier": "v.py:score"}}, "rollout.tasks",
     "must be set when rollout.harness_command is"),
    ({"training": {"max_importance_weight": 0.5}}, "training.max_importance_weight", "at least 1"),
    ({"rollout": {"server_port": 80}}, "rollout.server_port", "1024-63535"),
    ({"training": {"keep_checkpoints": -1}}, "training.keep_checkpoints", "at least 0, got -1"),
]


@pytest.mark.parametrize("raw,field,text", BAD_CONFIGS, ids=[b[1] + "-" + b[2][:12] for b in BAD_CONFIGS])
def test_bad_config_names_the_field(raw: dict, field: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.path == field
    assert text in str(info.value)


@pytest.mark.parametrize("raw,field,text", BAD_CONFIGS[:12], ids=[b[1] for b in BAD_CONFIGS[:12]])
def test_bad_config_cli_exit_2_without_traceback(tmp_path: Path, cli, raw: dict, field: str, text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = cli("config", "check", str(path))
    assert result.returncode == 2, result.stderr
    assert field in result.stderr and text in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr + result.stdout


def test_invalid_yaml_and_missing_file(tmp_path: Path, cli) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(textwrap.dedent("""\
        cluster:
          nodes: [1, 2
        """))
    result = cli("config", "check", str(path))
    assert result.returncode == 2 and "not valid YAML" in result.stderr and "line" in result.stderr
    result = cli("launch", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "config file not found" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_set_syntax(cli) -> None:
    result = cli("config", "check", "configs/local-tiny.yaml", "--set", "cluster.nodes")
    assert result.returncode == 2 and "KEY=VALUE" in result.stderr


def test_a_level_is_a_number_not_a_yes() -> None:
    """YAML's ``true`` equals 1 in Python; a field of numbered choices must not take it."""
    assert parse_config({"rollout": {"sleep_level": 2}}).rollout.sleep_level == 2
    with pytest.raises(ConfigError, match="rollout.sleep_level: must be one of 0, 1, 2, got True"):
        parse_config({"rollout": {"sleep_level": True}})
