"""Cells of two nodes on the real test cluster: every worker node runs a server replica of its
cell, and each replica gets calls, drains when its cell goes to train, and comes back with the
new weights; the training step spans every node of its cells.

configs/slurm-tiny.yaml with four worker nodes in two cells of two and the colocate policy (all
cells serve, then all train), so every replica moves. What ``status --json`` shows is polled while
the run goes on: ``servers[]`` has one row per replica with its ``cell``, ``node``, state, calls
taken and weight version."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gyrectl.capture.store import scan
from gyrectl.coordinator.events import PhaseChanged
from gyrectl.coordinator.state import Phase

from runs import events, launch_loop, status, wait_until_ended

pytestmark = [pytest.mark.usefixtures("slurm_cluster"), pytest.mark.vllm, pytest.mark.loop, pytest.mark.slow]

STEPS = 2
CELLS = {"cell0.0": 0, "cell0.1": 0, "cell1.0": 1, "cell1.1": 1}


@pytest.fixture(scope="module")
def watched(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The run, and every ``status --json`` view seen while it ran."""
    run_dir = launch_loop(cli, root=tmp_path_factory.mktemp("runs"), model=tiny_model_dir, name="replicas",
                          extra=("--set", "cluster.nodes=4", "--set", "cells.nodes_per_cell=2",
                                 "--set", "scheduler.policy=colocate", "--set", f"run.steps={STEPS}",
                                 "--set", "cluster.time_limit=00:40:00"))
    views, deadline = [], time.monotonic() + 1500
    while time.monotonic() < deadline:
        view = status(cli, run_dir)
        views.append(view)
        if view["job"]["state"] == "ended":
            break
        time.sleep(1.0)
    return run_dir, wait_until_ended(cli, run_dir, timeout=60), views


def test_the_run_completes_with_steps_spanning_both_nodes_of_both_cells(watched) -> None:
    _, view, _ = watched
    assert (view["job"]["state"], view["job"]["reason"]) == ("ended", "completed"), view["job"]
    assert [s["step"] for s in view["steps"]] == list(range(STEPS))
    assert all(s["world_size"] == 4 for s in view["steps"]), "one torchrun rank per node of both cells"
    cells = {c["id"]: c["nodes"] for c in view["cells"]}
    workers = [n["name"] for n in view["nodes"] if n["het_group"] == 1]
    assert cells == {0: workers[:2], 1: workers[2:]}


def test_every_worker_nodes_replica_gets_calls(watched) -> None:
    run_dir, view, views = watched
    rows = [row for v in views for row in v.get("servers") or ()]
    where = {row["name"]: (row["cell"], row["node"]) for row in rows}
    cells = {c["id"]: c["nodes"] for c in view["cells"]}
    assert where == {name: (cell, cells[cell][int(name[-1])]) for name, cell in CELLS.items()}, where
    assert {max(r["calls"] for r in rows if r["name"] == name) > 0 for name in CELLS} == {True}
    served = {stored.call.meta.server for stored in scan(run_dir / "trajectories" / "calls.seg").records}
    assert set(CELLS) <= served, served  # the captured calls name each replica that answered them


def test_every_replica_drains_when_its_cell_trains_and_returns_synced(watched) -> None:
    run_dir, _, views = watched
    phases = [(e.cell, e.phase) for e in events(run_dir) if isinstance(e, PhaseChanged)]
    assert {(0, Phase.DRAINING), (1, Phase.DRAINING), (0, Phase.RETURNING), (1, Phase.RETURNING)} <= set(phases)
    for name in CELLS:
        history = []  # (routed, weight version) of the replica, view by view
        for v in views:
            row = next((r for r in v.get("servers") or () if r["name"] == name), None)
            history.append((row is not None and row["state"] == "active", row and row["weight_version"]))
        first_active = next(i for i, (active, _) in enumerate(history) if active)
        left = next((i for i in range(first_active, len(history)) if not history[i][0]), None)
        assert left is not None, f"{name} never left the routing (it did not drain)"
        assert any(active and version is not None and version >= 1 for active, version in history[left:]), \
            f"{name} never served weights v1 or later after draining: {history}"
