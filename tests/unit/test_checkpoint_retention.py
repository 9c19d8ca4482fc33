"""Checkpoint retention (``training.keep_checkpoints``): the pure decision, what the coordinator's
state says is read, the head's side on a real run directory (v0 a link to a model folder outside
it), and the live reloads the rollouts report as under way until the coordinator hears of them."""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path

import pytest

from gyrectl.coordinator.events import WeightsSynced
from gyrectl.coordinator.state import CellState, CellTable, Limits, Phase, TrainStep, initial_state
from gyrectl.launch.retention import CheckpointRetention, versions_in_use, versions_to_remove
from gyrectl.rollout.live import live_rollouts
from gyrectl.rollout.replicas import CellServer
from gyrectl.run.rundir import RunDir

LIMITS = Limits(num_cells=5, slots_per_cell=4, batch_executions=4, max_staleness=1)


def state_of(*cells: CellState, version: int, train: TrainStep | None = None):
    return dataclasses.replace(initial_state(LIMITS), cells=CellTable(cells), version=version, train=train)


# -- the decision ---------------------------------------------------------------------------------
def test_the_newest_versions_stay_and_older_ones_go() -> None:
    assert versions_to_remove(on_disk=range(0, 8), newest=7, keep=2, in_use=()) == [1, 2, 3, 4, 5]
    assert versions_to_remove(on_disk=range(0, 8), newest=7, keep=1, in_use=()) == [1, 2, 3, 4, 5, 6]


def test_keep_0_keeps_every_version() -> None:
    assert versions_to_remove(on_disk=range(0, 40), newest=39, keep=0, in_use=()) == []


def test_v0_the_users_model_is_never_removed() -> None:
    assert 0 not in versions_to_remove(on_disk=[0, 1, 2, 3], newest=3, keep=1, in_use=())


def test_versions_in_use_stay_whatever_their_age() -> None:
    assert versions_to_remove(on_disk=range(0, 8), newest=7, keep=2, in_use={1, 4}) == [2, 3, 5]


def test_a_version_above_the_newest_is_a_commit_the_coordinator_has_not_heard_of() -> None:
    # step 5 committed v6 but its TrainEnded is not folded yet; v5 is the newest the state knows
    assert versions_to_remove(on_disk=range(0, 7), newest=5, keep=1, in_use=()) == [1, 2, 3, 4]


def test_fewer_versions_than_keep_remove_nothing() -> None:
    assert versions_to_remove(on_disk=[0, 1], newest=1, keep=3, in_use=()) == []


# -- what the coordinator's state says is read ----------------------------------------------------
CELLS = (CellState(id=0, phase=Phase.ROLLOUT, weight_version=6),
         CellState(id=1, phase=Phase.DRAINING, weight_version=4),
         CellState(id=2, phase=Phase.STARTING, weight_version=5),
         CellState(id=3, phase=Phase.RETURNING, weight_version=3, warm=True),
         CellState(id=4, phase=Phase.TRAIN, weight_version=2, sleeping_server="s4"))


def test_servers_that_serve_or_load_a_version_and_the_training_step_keep_it() -> None:
    state = state_of(*CELLS, version=7, train=TrainStep(index=7, cells=(4,), executions=4, started_at=0.0))
    # a sleeping server (cell 4, v2) serves nothing and wakes to the newest weights
    assert versions_in_use(state) == {6, 4, 5, 3, 7}


def test_once_the_loop_ended_only_loads_under_way_keep_a_version() -> None:
    assert versions_in_use(state_of(*CELLS, version=7), serving=False) == {5, 3}


# -- the head's side, on a run directory ------------------------------------------------------------


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    """v0 links to a model folder outside the run; v1..v6 are the trainer's folders."""
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    run = RunDir.create(tmp_path / "runs", "r")
    run.weights_dir(0).symlink_to(model)
    for version in range(1, 7):
        run.weights_dir(version).mkdir()
        (run.weights_dir(version) / "model.safetensors").write_bytes(b"\1" * 32)
    (run.optimizer_dir / "v6").mkdir(parents=True)
    (run.checkpoints_dir / ".v7.tmp-123").mkdir()  # step 6 writing its version
    return run


def test_retain_removes_what_no_one_reads_and_logs_each(run: RunDir, caplog: pytest.LogCaptureFixture) -> None:
    serving_v2 = state_of(CellState(id=0, phase=Phase.ROLLOUT, weight_version=2), version=6)
    retention = CheckpointRetention(run, keep=2, reloading=lambda: {3}, evaluating=lambda: {4})
    with caplog.at_level(logging.INFO, logger="gyrectl.launch.retention"):
        retention.retain(serving_v2)
    assert run.weight_versions() == [0, 2, 3, 4, 5, 6]
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["removed weights v1"]
    assert (run.weights_dir(0) / "model.safetensors").read_bytes() == b"\0" * 64  # the user's model
    assert (run.optimizer_dir / "v6").is_dir() and (run.checkpoints_dir / ".v7.tmp-123").is_dir()

    # the loop ended: what servers served and evaluations waited on goes, a reload under way stays
    retention.finish(serving_v2)
    assert run.weight_versions() == [0, 3, 5, 6]


def test_retain_keeps_every_version_with_keep_0(run: RunDir) -> None:
    CheckpointRetention(run, keep=0, reloading=set, evaluating=set).finish(state_of(version=6))
    assert run.weight_versions() == list(range(7))


def test_a_resumed_head_removes_what_the_head_before_it_left(run: RunDir) -> None:
    # a head died before it could remove anything; the next one's first round catches up
    CheckpointRetention(run, keep=3, reloading=set, evaluating=set).retain(state_of(version=6))
    assert run.weight_versions() == [0, 4, 5, 6]


# -- live reloads, as the rollouts report them ---------------------------------------------------------
class Gateway:
    def servers(self) -> list:
        return []


class Harnesses:
    def reap(self) -> list:
        return []


class BlockingSync:
    """A weight sync that returns once the test lets it."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def sync(self, url: str, weights_dir: Path, version: int) -> float:
        assert self.go.wait(10)
        return 0.0


def test_a_reload_keeps_its_version_until_the_coordinator_hears_it_is_served(tmp_path: Path) -> None:
    sync = BlockingSync()
    rollouts = live_rollouts(run=RunDir.create(tmp_path, "r"), gateway=Gateway(), harnesses=Harnesses(), tasks=[],
                            executions_per_task=1, batch_executions=1, verifier=lambda task, output: 0.0,
                            servers=[[CellServer("cell0", "http://127.0.0.1:1")]], replicas_of=lambda c, n: (),
                            weight_sync=sync)
    rollouts.servers.sync_weights(0, 5)
    assert rollouts.servers.reloading() == {5}
    sync.go.set()
    for thread in threading.enumerate():
        if thread.name == "sync-cell0":
            thread.join(10)
    # loaded, but until a poll hands WeightsSynced to the coordinator its state does not say so
    assert rollouts.servers.reloading() == {5}
    assert [(e.cell, e.version) for e in rollouts.executions.poll() if isinstance(e, WeightsSynced)] == [(0, 5)]
    assert rollouts.servers.reloading() == set()
