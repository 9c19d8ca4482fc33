"""The run's faults and recoveries (``status --json`` ``faults``, the text view's lines and
``logs/head.log``): each kind built as the actuator journals it, then read back."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from gyrectl.cli.status_cmd import faults_text
from gyrectl.config import dump_config, load_config
from gyrectl.coordinator.events import (
    CellLost,
    CellPlaced,
    Event,
    PhaseChanged,
    Resumed,
    StepFailed,
    TrainEnded,
    TrainerReleased,
    TrainRetried,
    TrainStarted,
)
from gyrectl.coordinator.journal import Journal, replay
from gyrectl.coordinator.state import Limits, Phase
from gyrectl.launch.head_log import event_line
from gyrectl.run.rundir import RunDir
from gyrectl.status.faults import KINDS, Fault, run_faults

LIMITS = Limits(num_cells=2, slots_per_cell=4, batch_executions=4, max_staleness=0)
T0 = 1_796_000_000.0


def serving(cell: int, at: float, step_id: str) -> list[Event]:
    return [PhaseChanged(cell=cell, phase=Phase.STARTING, at=at, step_id=step_id),
            PhaseChanged(cell=cell, phase=Phase.ROLLOUT, at=at + 30, step_id=step_id)]


def asleep(cell: int, at: float, step_id: str) -> list[Event]:
    """The cell's server drained and went to sleep at ``at``: the cell trains beside it."""
    return [PhaseChanged(cell=cell, phase=Phase.DRAINING, at=at - 1, step_id=step_id),
            PhaseChanged(cell=cell, phase=Phase.TRAIN, at=at, warm=True, sleeping_server=step_id)]


def faults_of(events: list[Event], **kwargs: bool) -> list[tuple[float, int | None, str, str, float | None]]:
    replay(events, LIMITS)  # a journal the coordinator's folds accept
    found = run_faults(events, **kwargs)
    assert all(fault.kind in KINDS for fault in found)
    return [(f.at, f.cell, f.kind, f.recovery, f.seconds) for f in found]


def test_a_killed_server_is_restarted() -> None:
    events = [*serving(0, 0.0, "s0"), StepFailed(cell=0, step_id="s0", role="rollout", exit_code=-9, at=100.0),
              PhaseChanged(cell=0, phase=Phase.STARTING, at=100.0, step_id="s1"),
              PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=141.2, step_id="s1")]
    assert faults_of(events) == [(100.0, 0, "server_died", "restarted", 41.2)]
    assert run_faults(events)[0].exit_code == -9
    assert faults_of(events[:-1]) == [(100.0, 0, "server_died", "pending", None)]
    assert faults_of(events[:-1], gave_up=True) == [(100.0, 0, "server_died", "gave up", None)]


def test_a_killed_sleeping_server_is_replaced_by_a_cold_start_when_its_cell_returns() -> None:
    events = [*serving(1, 0.0, "s1"), *asleep(1, 40.0, "s1"),
              StepFailed(cell=1, step_id="s1", role="rollout", exit_code=137, at=60.0),
              PhaseChanged(cell=1, phase=Phase.RETURNING, at=90.0, step_id="s2"),
              PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=120.0, step_id="s2")]
    assert faults_of(events) == [(60.0, 1, "sleeping_server_died", "cold start on return", 60.0)]
    assert faults_of(events[:-2]) == [(60.0, 1, "sleeping_server_died", "pending", None)]


def test_a_server_that_does_not_wake_is_replaced() -> None:
    events = [*serving(1, 0.0, "s1"), *asleep(1, 40.0, "s1"),
              StepFailed(cell=1, step_id="s1", role="rollout", exit_code=None, at=90.0, reason="wake_timeout"),
              PhaseChanged(cell=1, phase=Phase.RETURNING, at=90.0, step_id="s2"),
              PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=125.0, step_id="s2")]
    assert faults_of(events) == [(90.0, 1, "wake_timed_out", "replaced", 35.0)]


def test_a_server_that_does_not_fall_asleep_is_stopped() -> None:
    events = [*serving(1, 0.0, "s1"), PhaseChanged(cell=1, phase=Phase.DRAINING, at=40.0, step_id="s1"),
              StepFailed(cell=1, step_id="s1", role="rollout", exit_code=None, at=45.0, reason="sleep_timeout"),
              PhaseChanged(cell=1, phase=Phase.TRAIN, at=45.5)]
    assert faults_of(events) == [(45.0, 1, "sleep_timed_out", "stopped", 0.5)]


def test_a_member_killed_mid_step_has_the_step_retried() -> None:
    events = [PhaseChanged(cell=0, phase=Phase.TRAIN, at=1.0), PhaseChanged(cell=1, phase=Phase.TRAIN, at=1.0),
              TrainStarted(index=0, cells=(0, 1), take=(), at=10.0, step_ids=("t0", "t1")),
              StepFailed(cell=1, step_id="t1", role="train", exit_code=137, at=20.0),
              TrainRetried(index=0, at=20.0, step_ids=("t0b", "t1b")),
              TrainEnded(index=0, at=50.0)]
    assert faults_of(events) == [(20.0, 1, "trainer_died", "step retried", 30.0)]


def test_a_waiting_resident_member_that_dies_has_its_group_formed_again_at_the_next_step() -> None:
    events = [PhaseChanged(cell=0, phase=Phase.TRAIN, at=1.0), PhaseChanged(cell=1, phase=Phase.TRAIN, at=1.0),
              TrainStarted(index=0, cells=(0, 1), take=(), at=10.0, step_ids=("t0", "t1"), group="g0"),
              TrainEnded(index=0, at=30.0),
              StepFailed(cell=1, step_id="t1", role="train", exit_code=1, at=40.0),
              TrainerReleased(group="g0", at=40.0),
              TrainStarted(index=1, cells=(0, 1), take=(), at=55.0, step_ids=("t2", "t3"), group="g1")]
    assert faults_of(events) == [(40.0, 1, "idle_trainer_died", "trainer re-formed", 15.0)]


def test_a_group_released_because_the_next_step_trains_elsewhere_is_no_fault() -> None:
    events = [PhaseChanged(cell=0, phase=Phase.TRAIN, at=1.0),
              TrainStarted(index=0, cells=(0,), take=(), at=10.0, step_ids=("t0",), group="g0"),
              TrainEnded(index=0, at=30.0), PhaseChanged(cell=1, phase=Phase.TRAIN, at=31.0),
              TrainerReleased(group="g0", at=32.0),
              TrainStarted(index=1, cells=(0, 1), take=(), at=32.0, step_ids=("t1", "t2"), group="g1"),
              TrainEnded(index=1, at=60.0)]
    assert faults_of(events) == []


def test_a_lost_cell_recovers_once_placed_and_in_use() -> None:
    events = [*serving(1, 0.0, "s1"), CellLost(cell=1, at=50.0, nodes=("n1",)),
              CellPlaced(cell=1, nodes=("n2",), at=80.0),
              PhaseChanged(cell=1, phase=Phase.STARTING, at=81.0, step_id="s2"),
              PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=140.0, step_id="s2")]
    assert faults_of(events) == [(50.0, 1, "cell_lost", "placed", 90.0)]
    assert faults_of(events[:-2]) == [(50.0, 1, "cell_lost", "pending", None)]  # placed, not serving yet


def test_a_new_head_recovers_once_a_cell_serves_again() -> None:
    events = [*serving(0, 0.0, "s0"), Resumed(at=100.0, job_id="200"),
              PhaseChanged(cell=0, phase=Phase.STARTING, at=101.0, step_id="s1"),
              PhaseChanged(cell=1, phase=Phase.STARTING, at=101.0, step_id="s2"),
              PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=130.0, step_id="s2"),
              PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=131.0, step_id="s1")]
    assert faults_of(events) == [(100.0, None, "head_restarted", "resumed", 30.0)]


def test_faults_come_in_time_order_each_with_its_own_recovery() -> None:
    events = [*serving(0, 0.0, "s0"), *serving(1, 0.0, "s1"),
              StepFailed(cell=0, step_id="s0", role="rollout", exit_code=-9, at=50.0),
              PhaseChanged(cell=0, phase=Phase.STARTING, at=50.0, step_id="s2"),
              CellLost(cell=1, at=60.0, nodes=("n1",)),
              PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=90.0, step_id="s2")]
    assert faults_of(events) == [(50.0, 0, "server_died", "restarted", 40.0), (60.0, 1, "cell_lost", "pending", None)]


def test_json_has_exactly_the_five_keys() -> None:
    fault = Fault(at=T0, cell=None, kind="head_restarted", recovery="resumed", seconds=3.5, exit_code=None)
    assert fault.to_json() == {"at": T0, "cell": None, "kind": "head_restarted", "recovery": "resumed", "seconds": 3.5}


def test_text_shows_the_last_five_in_words() -> None:
    found = [Fault(at=T0 + i, cell=0, kind="server_died", recovery="restarted", seconds=41.25, exit_code=-9)
             for i in range(6)] + [Fault(at=T0 + 9, cell=1, kind="cell_lost", recovery="pending", seconds=None)]
    lines = faults_text(found).plain.splitlines()
    assert lines[:2] == ["faults and recoveries", "  ... 2 earlier (--json lists them all)"]
    assert len(lines) == 7 and lines[2].endswith(" cell 0 server died (exit -9) -> restarted in 41.2 s")
    assert lines[-1].endswith(" cell 1 lost its nodes -> pending")


def _run_with(tmp_path: Path, events: list[Event], *, ended: str) -> RunDir:
    run = RunDir.create(tmp_path, "r")
    run.config_file.write_text(dump_config(load_config("configs/local-tiny.yaml")))
    run.write_json(run.job_file, {"job_id": f"local-{os.getpid()}", "backend": "local", "layout": None,
                                  "submitted_at": T0, "previous_jobs": []})  # a live pid not the head's: ended
    with Journal(run.journal_file) as journal:
        for event in events:
            journal.append(event)
    with run.journal_file.open("a") as f:
        f.write(json.dumps({"event": "head_ended", "at": T0 + 500, "reason": ended, "error": ""}) + "\n")
    return run


KILLED = [*serving(0, T0, "s0"), StepFailed(cell=0, step_id="s0", role="rollout", exit_code=-9, at=T0 + 100),
          PhaseChanged(cell=0, phase=Phase.STARTING, at=T0 + 100, step_id="s1"),
          PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=T0 + 141.5, step_id="s1"),
          CellLost(cell=1, at=T0 + 200, nodes=("n1",))]


def test_status_json_and_text_list_the_faults(cli, tmp_path: Path) -> None:
    run = _run_with(tmp_path, KILLED, ended="failed")
    view = json.loads(cli("status", str(run.path), "--json").stdout)
    assert view["faults"] == [{"at": T0 + 100, "cell": 0, "kind": "server_died", "recovery": "restarted",
                               "seconds": 41.5},
                              {"at": T0 + 200, "cell": 1, "kind": "cell_lost", "recovery": "gave up", "seconds": None}]
    text = cli("status", str(run.path), env={"COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    assert "cell 0 server died (exit -9) -> restarted in 41.5 s" in text.stdout
    assert "cell 1 lost its nodes -> gave up" in text.stdout


def test_status_of_a_run_without_faults_shows_none(cli, tmp_path: Path) -> None:
    run = _run_with(tmp_path, serving(0, T0, "s0"), ended="stopped")
    assert json.loads(cli("status", str(run.path), "--json").stdout)["faults"] == []
    text = cli("status", str(run.path), env={"COLUMNS": "200"})
    assert text.returncode == 0 and "recoveries" not in text.stdout and " -> " not in text.stdout


@pytest.mark.parametrize(("event", "said"), [
    (StepFailed(cell=0, step_id="s0", role="rollout", exit_code=-9, at=1.0),
     "cell 0: its rollout server (step s0) exited on its own (exit code -9); its calls go to other servers and a new "
     "server starts"),
    (StepFailed(cell=1, step_id="s1", role="rollout", exit_code=None, at=1.0, reason="wake_timeout"),
     "cell 1: its sleeping rollout server (step s1) did not wake within rollout.wake_timeout_s; stopped, a new one "
     "cold-starts"),
    (StepFailed(cell=1, step_id="s1", role="rollout", exit_code=None, at=1.0, reason="sleep_timeout"),
     "cell 1: its drained rollout server (step s1) did not go to sleep within rollout.wake_timeout_s; stopped"),
    (StepFailed(cell=1, step_id="t1", role="train", exit_code=137, at=1.0),
     "cell 1: its training member (step t1) exited on its own (exit code 137); the step starts again"),
    (CellLost(cell=1, at=1.0, nodes=("n1",)), "cell 1 lost its node(s) n1: its calls go to other servers"),
])
def test_head_log_says_what_failed_and_what_the_head_does(event: Event, said: str) -> None:
    line = event_line(event)
    assert line is not None and line[0] == logging.WARNING and line[1].startswith(said), line
