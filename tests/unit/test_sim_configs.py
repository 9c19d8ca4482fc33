"""The shipped simulator configs load with the project's loader and have the advertised shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from gyrectl.config import load_config
from gyrectl.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "cells", "gpus_per_cell"), [("sim-32nodes", 8, 32), ("sim-192nodes", 32, 48)])
def test_sim_configs_load(name, cells, gpus_per_cell):
    config = load_config(REPO / "configs" / f"{name}.yaml")
    assert config.num_cells == cells
    assert config.cells.nodes_per_cell * config.cluster.gpus_per_node == gpus_per_cell


def test_simulator_field_is_validated():
    with pytest.raises(ConfigError, match="simulator.weight_sync_s"):
        load_config(REPO / "configs/sim-32nodes.yaml", ["simulator.weight_sync_s=-1"])
