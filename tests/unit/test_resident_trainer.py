"""The coordinator's side of resident trainers: a training group that stays up between steps is
asked for the next step on the same cells instead of starting members again, is released when
the cells change, and is replaced when a member exits. The fold, the pure decisions, the
actuator's calls, the step specs, and whole simulated runs through the real coordinator."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from gyrectl.cluster.base import Cluster, StepSpec, StepState, StepStatus
from gyrectl.config.loader import parse_config
from gyrectl.coordinator.actions import StartTrain
from gyrectl.coordinator.actuator import Actuator
from gyrectl.coordinator.events import (
    CellLost,
    Resumed,
    StepFailed,
    TrainEnded,
    TrainerReleased,
    TrainRetried,
    TrainStarted,
    apply,
    from_record,
    to_record,
)
from gyrectl.coordinator.observation import Observation
from gyrectl.coordinator.recovery import (
    MEMBER_SETTLE_S,
    EndTraining,
    LoseCell,
    ReleaseTrainer,
    RetryTraining,
    recover,
)
from gyrectl.coordinator.state import CellState, CellTable, Limits, Phase, TrainerGroup, TrainStep, initial_state
from gyrectl.launch.steps import step_factory
from gyrectl.run.rundir import RunDir
from gyrectl.sim.run import simulate

from coordinator_cases import RecordingTrainers, Unused, check_invariants, small_config, workload

RESIDENT = Limits(num_cells=3, slots_per_cell=4, batch_executions=2, max_staleness=0, sleep_level=1,
                  resident_trainer=True)
RUNNING, FAILED, SUCCEEDED = StepState.RUNNING, StepState.FAILED, StepState.SUCCEEDED
GROUP = TrainerGroup(group="g", cells=(1, 2), step_ids=("t1", "t2"))


def training(*, train: bool = True, **changes) -> object:
    """Cells 1 and 2 in the pool with the resident group ``g`` up on them (training step 3 if ``train``)."""
    cells = CellTable([CellState(id=0, phase=Phase.ROLLOUT, step_id="s0"),
                       CellState(id=1, phase=Phase.TRAIN, step_id="t1"),
                       CellState(id=2, phase=Phase.TRAIN, step_id="t2")])
    step = TrainStep(index=3, cells=(1, 2), executions=2, started_at=0.0, group="g") if train else None
    return dataclasses.replace(initial_state(RESIDENT), cells=cells, version=3, trainer=GROUP, train=step, **changes)


def members(*states: StepState) -> tuple[StepStatus, ...]:
    return tuple(StepStatus(f"t{i + 1}", s, 9 if s is FAILED else (0 if s.ended else None))
                 for i, s in enumerate(states))


def seen(*states: StepState, committed: bool = False) -> Observation:
    return Observation(steps={"s0": StepStatus("s0", RUNNING)}, trainer=members(*states), committed=committed)


def test_a_resident_step_ends_when_its_weights_are_committed_and_its_members_stay_up() -> None:
    assert recover(training(), seen(RUNNING, RUNNING)) == []
    assert recover(training(), seen(RUNNING, RUNNING, committed=True)) == [EndTraining(index=3, stop=())]
    # a member that exited once it committed does not fail the step: the commit is read after it
    assert recover(training(), seen(RUNNING, FAILED, committed=True))[0] == EndTraining(index=3, stop=())


def test_a_member_that_exits_before_the_commit_fails_the_step_and_the_retry_is_a_new_group() -> None:
    for ended in (FAILED, SUCCEEDED):  # exit 0 without a commit is no success for a resident member
        assert recover(training(), seen(RUNNING, ended)) == [
            RetryTraining(index=3, cells=(1, 2), attempt=1, failed=((2, "t2", members(RUNNING, ended)[1].exit_code),),
                          stop=("t1",), resident=True)]


def test_a_waiting_group_whose_member_exits_is_released() -> None:
    idle = training(train=False)
    assert recover(idle, seen(RUNNING, RUNNING)) == []
    assert recover(idle, seen(FAILED, RUNNING)) == [ReleaseTrainer(group="g", failed=((1, "t1", 9),), stop=("t2",))]
    on_a_lost_cell = dataclasses.replace(seen(FAILED, RUNNING), lost_later=frozenset({1}))
    assert recover(idle, on_a_lost_cell) == []  # answered as a loss next round


def test_a_broken_group_waits_a_moment_for_its_other_members_so_the_failure_names_the_right_cell() -> None:
    """Cell 2's worker was killed: its member takes a moment to exit, while cell 1's fails at once
    on the rendezvous store cell 2 held. The members that end within ``MEMBER_SETTLE_S`` of the
    first are all reported, each with its exit code (137: the killed worker's)."""
    first = StepStatus("t1", FAILED, 1, ended_at=100.0)
    waiting = dataclasses.replace(seen(), trainer=(first, StepStatus("t2", RUNNING)), at=101.0)
    for state in (training(train=False), training()):
        assert recover(state, waiting) == []
    both = dataclasses.replace(waiting, trainer=(first, StepStatus("t2", FAILED, 137, ended_at=101.5)), at=102.0)
    assert recover(training(train=False), both) == [
        ReleaseTrainer(group="g", failed=((1, "t1", 1), (2, "t2", 137)), stop=())]
    assert recover(training(), both)[0].failed == ((1, "t1", 1), (2, "t2", 137))
    late = dataclasses.replace(waiting, at=100.0 + MEMBER_SETTLE_S + 0.1)  # the other never ended: stopped
    assert recover(training(train=False), late) == [ReleaseTrainer(group="g", failed=((1, "t1", 1),), stop=("t2",))]


def test_a_lost_cell_stops_the_group_it_was_in_even_while_the_cell_serves() -> None:
    idle = training(train=False)
    idle = dataclasses.replace(idle, cells=CellTable([*idle.cells[:2],
                                                      CellState(id=2, phase=Phase.ROLLOUT, step_id="s2")]))
    assert recover(idle, Observation(lost=frozenset({2}))) == [LoseCell(cell=2, stop=("s2", "t1", "t2"), release=None)]


def test_the_fold_keeps_the_group_between_steps_and_forgets_it_when_released_lost_or_resumed() -> None:
    state = training(train=False)
    state = dataclasses.replace(state, buffer=((0, 3, 2),), trainer=None)
    started = TrainStarted(index=3, cells=(1, 2), take=((0, 3, 2),), at=1.0, step_ids=("t1", "t2"), group="g")
    assert from_record(to_record(started)) == started
    state = apply(state, started)
    assert state.trainer == GROUP and state.train.group == "g"
    state = apply(state, TrainEnded(index=3, at=2.0))
    assert state.trainer == GROUP and state.version == 4  # up, waiting for step 4
    reused = TrainStarted(index=4, cells=(1, 2), take=(), at=3.0, step_ids=("t1", "t2"), group="g", reused=True)
    assert apply(state, reused).trainer == GROUP
    retried = apply(apply(state, reused), TrainRetried(index=4, at=4.0, step_ids=("u1", "u2"), group="h"))
    assert retried.trainer == TrainerGroup(group="h", cells=(1, 2), step_ids=("u1", "u2"))
    assert apply(state, TrainerReleased(group="g", at=3.0)).trainer is None
    assert apply(state, CellLost(cell=2, at=3.0)).trainer is None
    assert apply(state, CellLost(cell=0, at=3.0)).trainer == GROUP
    assert apply(state, Resumed(at=3.0)).trainer is None
    old = {k: v for k, v in to_record(started).items() if k not in ("group", "reused")}
    assert from_record(old) == dataclasses.replace(started, group="")  # a journal from before


class Steps(Cluster):
    backend = "scripted"

    def __init__(self) -> None:
        self.started: list[StepSpec] = []
        self.stopped: list[str] = []

    def discover(self):
        return []

    def start_step(self, spec: StepSpec) -> str:
        self.started.append(spec)
        return f"new-{spec.name}"

    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        self.stopped.append(step_id)

    def step_status(self, step_id: str) -> StepStatus:
        return StepStatus(step_id, RUNNING)


class Batches:
    def claim(self, *, index, take):
        return 0  # none of the batch left out


def actuator(tmp_path: Path, steps: Steps, trainers: RecordingTrainers, *, resident: bool = True) -> Actuator:
    config = parse_config({"cluster": {"nodes": 3}, "training": {"resident": resident}})
    return Actuator(cluster=steps, executions=Unused(), servers=Unused(), batches=Batches(),
                    clock=type("C", (), {"now": lambda self: 7.0})(),
                    steps=step_factory(config, RunDir(tmp_path)), trainers=trainers,
                    cell_nodes=[("n0",), ("n1",), ("n2",)])


def test_the_next_step_on_the_same_cells_is_asked_of_the_group_and_starts_nothing(tmp_path: Path) -> None:
    steps, trainers = Steps(), RecordingTrainers()
    events = actuator(tmp_path, steps, trainers).act(StartTrain(index=3, cells=(2, 1), take=()), training(train=False))
    assert trainers.requests == [(3, "g")] and steps.started == [] and steps.stopped == []
    assert events == [TrainStarted(index=3, cells=(1, 2), take=(), at=7.0, step_ids=("t1", "t2"), group="g",
                                   reused=True)]


def test_a_step_on_other_cells_releases_the_group_and_starts_a_new_one(tmp_path: Path) -> None:
    steps, trainers = Steps(), RecordingTrainers()
    state = training(train=False)
    state = dataclasses.replace(state, cells=CellTable([CellState(id=0, phase=Phase.TRAIN), *state.cells[1:]]))
    released, started = actuator(tmp_path, steps, trainers).act(StartTrain(index=3, cells=(0, 1, 2), take=()), state)
    assert released == TrainerReleased(group="g", at=7.0) and steps.stopped == ["t1", "t2"] and trainers.requests == []
    assert started.group.startswith("step3-try0-") and not started.reused
    assert [spec.env["GYRECTL_TRAINER_GROUP"] for spec in steps.started] == [started.group] * 3
    assert all(spec.env["GYRECTL_TRAINER_RESIDENT"] == "1" and spec.overlap for spec in steps.started)


def test_without_resident_trainers_every_step_starts_its_members(tmp_path: Path) -> None:
    steps, trainers = Steps(), RecordingTrainers()
    state = dataclasses.replace(training(train=False), trainer=None,
                                limits=dataclasses.replace(RESIDENT, resident_trainer=False))
    start = StartTrain(index=3, cells=(1, 2), take=())
    [started] = actuator(tmp_path, steps, trainers, resident=False).act(start, state)
    assert started.group == "" and len(steps.started) == 2
    assert not any("GYRECTL_TRAINER_GROUP" in spec.env for spec in steps.started)


def test_a_rollout_server_may_share_its_cell_with_a_waiting_trainer(tmp_path: Path) -> None:
    for resident, sleep_level, overlap in ((True, 0, True), (False, 1, True), (False, 0, False)):
        config = parse_config({"training": {"resident": resident}, "rollout": {"sleep_level": sleep_level}})
        spec = step_factory(config, RunDir(tmp_path)).rollout(cell=0, nodes=("n0",), version=0)
        assert spec.overlap is overlap


def _trainer_starts(events) -> Counter:
    return Counter("reused" if e.reused else "started" for e in events if isinstance(e, TrainStarted))


def test_a_simulated_colocate_run_starts_one_trainer_group_and_reuses_it_for_every_later_step() -> None:
    config = small_config(policy="colocate", cells=2, batch=4, steps=5)
    events = simulate(config, workload_spec=workload([30.0, 50.0, 80.0, 120.0] * 5)).events
    check_invariants(config, events)
    assert _trainer_starts(events) == Counter(started=1, reused=4)
    assert not any(isinstance(e, (TrainerReleased, StepFailed)) for e in events)
    cold = simulate(dataclasses.replace(config, training=dataclasses.replace(config.training, resident=False)),
                    workload_spec=workload([30.0, 50.0, 80.0, 120.0] * 5)).events
    assert _trainer_starts(cold) == Counter(started=5)


def test_a_simulated_elastic_run_keeps_its_group_while_the_pool_stays_the_same() -> None:
    config = small_config(policy="elastic", cells=4, batch=8, steps=6)
    events = simulate(config, workload_spec="heavy-tail", seed=3).events
    state = check_invariants(config, events)
    starts = _trainer_starts(events)
    released = sum(isinstance(e, TrainerReleased) for e in events)
    assert state.version == 6 and starts["reused"] >= 1
    assert starts["started"] == released + 1  # every new group after the first released the one before
