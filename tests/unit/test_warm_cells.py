"""Warm cells: a drained server sleeps while its cell trains and wakes when the cell returns, so a
cell cold-starts one server for the whole run. The pure decisions (recovery), the fold, the
actuator's calls (with failures), and whole simulated runs through the real coordinator."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gyrectl.cluster.base import Cluster, StepSpec, StepState, StepStatus
from gyrectl.config.loader import parse_config
from gyrectl.coordinator.actions import MoveCell
from gyrectl.coordinator.actuator import Actuator
from gyrectl.coordinator.events import PhaseChanged, StepFailed, SyncStarted, apply, from_record, to_record
from gyrectl.coordinator.observation import Observation
from gyrectl.coordinator.recovery import (
    MAX_CELL_FAILURES,
    FellAsleep,
    ForgetServer,
    GiveUp,
    LoseCell,
    ReplaceWaking,
    RouteServer,
    SleepDrained,
    StopDrained,
    recover,
)
from gyrectl.coordinator.state import CellState, CellTable, Limits, Phase, initial_state
from gyrectl.launch.steps import step_factory
from gyrectl.run.rundir import RunDir
from gyrectl.sim.run import simulate

from coordinator_cases import RecordingTrainers, Unused, check_invariants, small_config, workload

WARM = Limits(num_cells=2, slots_per_cell=4, batch_executions=2, max_staleness=0, sleep_level=1)
RUNNING, FAILED = StepState.RUNNING, StepState.FAILED


def state_of(*cells: CellState, limits: Limits = WARM, version: int = 3):
    return dataclasses.replace(initial_state(limits), cells=CellTable(cells), version=version)


def status(step_id: str, state: StepState) -> StepStatus:
    return StepStatus(step_id, state, 9 if state is FAILED else None)


def test_a_drained_server_sleeps_at_the_configured_level_and_level_0_stops_it() -> None:
    """The sleep runs off the coordinator's thread: asked (again) while it is under way, and the
    cell trains once the server sleeps; one that did not answer in time is stopped (a fault)."""
    draining = CellState(id=1, phase=Phase.DRAINING, step_id="s1", weight_version=2)
    seen = Observation(sessions={1: 0})
    assert recover(state_of(CellState(id=0), draining), seen) == [SleepDrained(cell=1, level=1)]
    assert recover(state_of(CellState(id=0), draining), dataclasses.replace(seen, asleep={1: True})) == [
        FellAsleep(cell=1, step_id="s1", weight_version=2)]
    assert recover(state_of(CellState(id=0), draining), dataclasses.replace(seen, asleep={1: False})) == [
        StopDrained(cell=1, step_id="s1", reason="sleep_timeout")]
    cold = dataclasses.replace(WARM, sleep_level=0)
    assert recover(state_of(CellState(id=0), draining, limits=cold), seen) == [StopDrained(cell=1, step_id="s1")]


def test_a_woken_server_is_routed_only_once_its_weight_reload_is_done() -> None:
    waking = CellState(id=1, phase=Phase.RETURNING, step_id="s1", weight_version=2, syncing=True, warm=True)
    seen = Observation(steps={"s1": status("s1", RUNNING)}, ready=frozenset({1}))
    assert recover(state_of(CellState(id=0), waking), seen) == []
    synced = dataclasses.replace(waking, syncing=False, weight_version=3)
    assert recover(state_of(CellState(id=0), synced), seen) == [RouteServer(cell=1, step_id="s1", weight_version=3)]


def test_a_sleeping_server_that_exits_is_forgotten_and_once_too_often_ends_the_run() -> None:
    asleep = CellState(id=1, phase=Phase.TRAIN, sleeping_server="s1")
    seen = Observation(steps={"s1": status("s1", FAILED)})
    assert recover(state_of(CellState(id=0), asleep), seen) == [ForgetServer(cell=1, step_id="s1", exit_code=9)]
    on_a_lost_cell = dataclasses.replace(seen, lost_later=frozenset({1}))
    assert recover(state_of(CellState(id=0), asleep), on_a_lost_cell) == []  # answered as a loss next round
    worn = dataclasses.replace(asleep, failures=MAX_CELL_FAILURES - 1)
    [give_up] = recover(state_of(CellState(id=0), worn), seen)
    assert isinstance(give_up, GiveUp) and "asleep" in give_up.message


def test_a_lost_cell_stops_its_sleeping_server_too() -> None:
    asleep = CellState(id=1, phase=Phase.TRAIN, sleeping_server="s1")
    assert recover(state_of(CellState(id=0), asleep), Observation(lost=frozenset({1}))) == [
        LoseCell(cell=1, stop=("s1",), release=None)]


def test_the_fold_keeps_a_sleeping_server_through_training_and_a_dead_one_is_forgotten() -> None:
    state = state_of(CellState(id=0), CellState(id=1, phase=Phase.DRAINING, step_id="s1", weight_version=2))
    slept = PhaseChanged(cell=1, phase=Phase.TRAIN, at=5.0, weight_version=2, warm=True, sleeping_server="s1")
    assert from_record(to_record(slept)) == slept
    state = apply(state, slept)
    assert (state.cells[1].sleeping_server, state.cells[1].weight_version) == ("s1", 2)
    died = apply(state, StepFailed(cell=1, step_id="s1", role="rollout", exit_code=9, at=6.0))
    assert died.cells[1].sleeping_server == "" and died.cells[1].failures == 1
    old = {k: v for k, v in to_record(PhaseChanged(cell=1, phase=Phase.TRAIN, at=5.0)).items()
           if k not in ("warm", "sleeping_server")}
    assert from_record(old) == PhaseChanged(cell=1, phase=Phase.TRAIN, at=5.0)  # a journal from before


class Steps(Cluster):
    backend = "scripted"

    def __init__(self, *, ended: bool = False) -> None:
        """``ended``: a stopped step has ended by the time its status is read."""
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.ended = ended

    def discover(self):
        return []

    def start_step(self, spec: StepSpec) -> str:
        self.started.append(spec.name)
        return f"new-{spec.name}"

    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        self.stopped.append(step_id)

    def step_status(self, step_id: str) -> StepStatus:
        if self.ended and step_id in self.stopped:
            return StepStatus(step_id, StepState.CANCELLED)
        return StepStatus(step_id, StepState.RUNNING)


class Servers:
    """The cell servers: records the calls, answers as told (a sleep under way, done or failed)."""

    def __init__(self, answers: dict | None = None) -> None:
        """``answers``: what a call answers, by name (None otherwise)."""
        self.calls: list[tuple] = []
        self.answers = answers or {}

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return self.answers.get(name)
        return call

    def sessions(self, cell: int) -> int:
        return 0


def actuator(tmp_path: Path, servers: Servers, steps: Steps) -> Actuator:
    config = parse_config({"cluster": {"nodes": 2}})
    return Actuator(cluster=steps, executions=Unused(), servers=servers, batches=Unused(),
                    clock=type("C", (), {"now": lambda self: 7.0})(),
                    steps=step_factory(config, RunDir(tmp_path)), trainers=RecordingTrainers(),
                    cell_nodes=[("n0",), ("n1",)])


@pytest.mark.parametrize(("level", "served", "synced"), [(1, 3, False), (1, 2, True), (2, 3, True)])
def test_returning_wakes_the_sleeping_server_and_syncs_only_what_it_lacks(tmp_path: Path, level: int, served: int,
                                                                          synced: bool) -> None:
    servers, steps = Servers(), Steps()
    asleep = CellState(id=1, phase=Phase.TRAIN, sleeping_server="s1", weight_version=served)
    state = state_of(CellState(id=0), asleep, limits=dataclasses.replace(WARM, sleep_level=level))
    events = actuator(tmp_path, servers, steps).act(MoveCell(cell=1, to=Phase.ROLLOUT), state)
    woke = PhaseChanged(cell=1, phase=Phase.RETURNING, at=7.0, step_id="s1", weight_version=served, warm=True)
    assert events == [woke] + ([SyncStarted(cell=1, version=3, at=7.0)] if synced else [])
    assert steps.started == [] and ("wake", (1,), {}) in servers.calls
    assert (("sync_weights", (1, 3), {}) in servers.calls) is synced


def test_a_woken_server_that_does_not_answer_in_time_or_dies_waking_is_replaced() -> None:
    """The wake runs off the coordinator's thread: the cell waits, unrouted, for at most
    ``rollout.wake_timeout_s``; a server still not answering then (frozen, hung) or one that
    exited is replaced by a cold start, and counts against the cell's failures."""
    waking = CellState(id=1, phase=Phase.RETURNING, step_id="s1", weight_version=3, warm=True, since=100.0)
    state = state_of(CellState(id=0), waking, limits=dataclasses.replace(WARM, wake_timeout_s=10.0))
    running = {"s1": status("s1", RUNNING)}
    assert recover(state, Observation(steps=running, at=109.0)) == []  # still within its time
    assert recover(state, Observation(steps=running, ready=frozenset({1}), at=111.0)) == [
        RouteServer(cell=1, step_id="s1", weight_version=3)]  # it woke
    assert recover(state, Observation(steps=running, at=111.0)) == [
        ReplaceWaking(cell=1, step_id="s1", exit_code=None, version=3, reason="wake_timeout")]
    assert recover(state, Observation(steps={"s1": status("s1", FAILED)}, at=101.0)) == [
        ReplaceWaking(cell=1, step_id="s1", exit_code=9, version=3, reason="")]
    cold = dataclasses.replace(waking, warm=False)  # a cold start has no wake to wait for
    assert recover(dataclasses.replace(state, cells=CellTable([CellState(id=0), cold])),
                   Observation(steps=running, at=1000.0)) == []
    worn = dataclasses.replace(waking, failures=MAX_CELL_FAILURES - 1)
    [give_up] = recover(dataclasses.replace(state, cells=CellTable([CellState(id=0), worn])),
                        Observation(steps=running, at=111.0))
    assert isinstance(give_up, GiveUp) and "did not wake in time" in give_up.message


def test_the_actuator_stops_a_server_that_did_not_wake_and_cold_starts_the_returning_cell(tmp_path: Path) -> None:
    servers, steps = Servers(), Steps()  # its ready() answers nothing: never woke
    waking = CellState(id=1, phase=Phase.RETURNING, step_id="s1", weight_version=3, warm=True, since=-10.0)
    state = state_of(CellState(id=0), waking, limits=dataclasses.replace(WARM, wake_timeout_s=10.0))
    failed, returning = actuator(tmp_path, servers, steps).observe(state)  # its clock says 7.0
    assert failed == StepFailed(cell=1, step_id="s1", role="rollout", exit_code=None, at=7.0, reason="wake_timeout")
    assert steps.stopped == ["s1"] and steps.started == ["rollout-cell1"]
    assert (returning.phase, returning.step_id, returning.warm) == (Phase.RETURNING, "new-rollout-cell1", False)
    state = apply(apply(state, failed), returning)
    assert state.cells[1].step_id == "new-rollout-cell1" and state.cells[1].failures == 1


def test_the_actuator_starts_the_sleep_then_trains_the_cell_once_it_sleeps_or_stops_it(tmp_path: Path) -> None:
    state = state_of(CellState(id=0), CellState(id=1, phase=Phase.DRAINING, step_id="s1", weight_version=2))
    servers, steps = Servers(answers={"asleep": None}), Steps()
    assert actuator(tmp_path, servers, steps).observe(state) == []  # falling asleep: the cell waits
    assert ("sleep", (1,), {"level": 1}) in servers.calls and steps.stopped == []
    slept = actuator(tmp_path, Servers(answers={"asleep": True}), Steps()).observe(state)
    assert slept == [PhaseChanged(cell=1, phase=Phase.TRAIN, at=7.0, weight_version=2, warm=True,
                                  sleeping_server="s1")]
    steps = Steps(ended=True)
    events = actuator(tmp_path, Servers(answers={"asleep": False}), steps).observe(state)
    assert steps.stopped == ["s1"]
    assert events == [StepFailed(cell=1, step_id="s1", role="rollout", exit_code=None, at=7.0, reason="sleep_timeout"),
                      PhaseChanged(cell=1, phase=Phase.TRAIN, at=7.0)]


def _cold_starts(events) -> dict[int, int]:
    """Servers each cell started: every first start, and every return that did not wake one."""
    starts: dict[int, int] = {}
    for event in events:
        if isinstance(event, PhaseChanged) and event.phase in (Phase.STARTING, Phase.RETURNING) and not event.warm:
            starts[event.cell] = starts.get(event.cell, 0) + 1
    return starts


def test_a_simulated_run_starts_one_server_per_cell_however_often_its_cells_move() -> None:
    config = small_config(policy="colocate", cells=3, slots=4, batch=6, steps=4)
    sim = simulate(config, workload_spec=workload([10, 20, 400, 15, 30, 25]))
    check_invariants(config, sim.events)
    returns = sum(isinstance(e, PhaseChanged) and e.phase is Phase.RETURNING for e in sim.events)
    assert returns >= 2 * 3 and _cold_starts(sim.events) == {0: 1, 1: 1, 2: 1}
    stopping = dataclasses.replace(config, rollout=dataclasses.replace(config.rollout, sleep_level=0))
    cold = simulate(stopping, workload_spec=workload([10, 20, 400, 15, 30, 25]))
    assert sum(_cold_starts(cold.events).values()) > 3
