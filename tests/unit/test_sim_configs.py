"""The shipped simulator configs load with the project's loader and have the advertised shape."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gyrectl.config import load_config
from gyrectl.coordinator.state import limits_from_config
from gyrectl.errors import ConfigError
from gyrectl.sim.run import simulated_limits

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "cells", "gpus_per_cell"), [("sim-32nodes", 8, 32), ("sim-192nodes", 32, 48)])
def test_sim_configs_load(name, cells, gpus_per_cell):
    config = load_config(REPO / "configs" / f"{name}.yaml")
    assert config.num_cells == cells
    assert config.cells.nodes_per_cell * config.cluster.gpus_per_node == gpus_per_cell


def test_simulator_field_is_validated():
    with pytest.raises(ConfigError, match="simulator.weight_sync_s"):
        load_config(REPO / "configs/sim-32nodes.yaml", ["simulator.weight_sync_s=-1"])


def test_real_runs_read_no_simulator_field_and_the_simulator_passes_its_own():
    config = load_config(REPO / "configs/sim-32nodes.yaml",
                         ["simulator.workload_size=16", "scheduler.batch_order=dispatch", "eval.every_steps=2",
                          "eval.tasks=eval.jsonl", "eval.blocking=true"])
    real, simulated = limits_from_config(config), simulated_limits(config)
    assert real.total_executions == config.run.steps * config.training.batch_executions
    assert (simulated.total_executions, simulated.eval_blocks_every, real.eval_blocks_every) == (16, 0, 2)
    assert real.batch_order == simulated.batch_order == "dispatch"
    assert real.eval_final and not simulated.eval_final  # the simulator runs no evaluation to wait for
    with pytest.raises(ConfigError, match="simulator.batch_order"):  # moved to scheduler.batch_order
        load_config(REPO / "configs/sim-32nodes.yaml", ["simulator.batch_order=dispatch"])


def test_a_simulated_workload_is_whole_groups():
    with pytest.raises(ConfigError, match="workload_size: 12 is not a multiple of rollout.executions_per_task=8"):
        load_config(REPO / "configs/sim-32nodes.yaml", ["simulator.workload_size=12"])


def test_the_coordinator_reads_no_simulator_field():
    reads = [f"{path.name}:{node.lineno}" for path in sorted((REPO / "gyrectl/coordinator").rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)
             and node.attr == "simulator"]
    assert not reads, f"the coordinator reads the simulator's config section: {reads}"
