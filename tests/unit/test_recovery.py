"""How the coordinator answers faults, on hand-built states and observations (pure: no cluster),
and what ``read_world`` reads to build the observation."""

from __future__ import annotations

import dataclasses

from gyrectl.cluster.base import Cluster, Node, StepState, StepStatus
from gyrectl.coordinator.observation import Observation, read_world
from gyrectl.coordinator.recovery import (
    MAX_CELL_FAILURES,
    MAX_TRAIN_ATTEMPTS,
    EndTraining,
    GiveUp,
    LoseCell,
    PlaceCell,
    RestartServer,
    RetryTraining,
    RouteServer,
    StopDrained,
    recover,
)
from gyrectl.coordinator.state import CellState, CellTable, Limits, Phase, TrainStep, initial_state

from coordinator_cases import RecordingTrainers

LIMITS = Limits(num_cells=4, slots_per_cell=4, batch_executions=8, max_staleness=1, total_executions=32)
RUNNING, FAILED, SUCCEEDED = StepState.RUNNING, StepState.FAILED, StepState.SUCCEEDED


def state_of(*phases: Phase, failures: int = 0, train: tuple[int, ...] = (), attempt: int = 0, version: int = 2):
    """Cells in ``phases``, cell ``i`` running step ``s{i}`` (``t{i}`` in training step ``version``)."""
    cells = CellTable(CellState(id=i, phase=p, step_id=("t" if i in train else "s") + str(i), failures=failures,
                                weight_version=1) for i, p in enumerate(phases))
    step = TrainStep(index=version, cells=train, executions=8, started_at=0.0, attempt=attempt) if train else None
    return dataclasses.replace(initial_state(LIMITS), cells=cells, version=version, train=step)


def statuses(**states: StepState) -> dict[str, StepStatus]:
    return {step_id: StepStatus(step_id, state, 9 if state is FAILED else None) for step_id, state in states.items()}


def members(**states: StepState) -> tuple[StepStatus, ...]:
    """A training step's member statuses, in its cells' order."""
    return tuple(statuses(**states).values())


SERVING = (Phase.ROLLOUT, Phase.ROLLOUT)
TRAINING = (Phase.ROLLOUT, Phase.TRAIN, Phase.TRAIN, Phase.TRAIN)


def test_a_server_that_died_under_its_calls_is_restarted_with_the_latest_weights():
    seen = Observation(steps=statuses(s0=RUNNING, s1=FAILED))
    assert recover(state_of(*SERVING), seen) == [RestartServer(cell=1, step_id="s1", exit_code=9, version=2)]
    assert recover(state_of(*SERVING, failures=MAX_CELL_FAILURES - 2), seen) == [
        RestartServer(cell=1, step_id="s1", exit_code=9, version=2)]  # the last restart allowed


def test_a_server_that_dies_once_too_often_ends_the_run():
    seen = Observation(steps=statuses(s0=RUNNING, s1=FAILED))
    [give_up] = recover(state_of(*SERVING, failures=MAX_CELL_FAILURES - 1), seen)
    assert give_up == GiveUp(f"the rollout server of cell 1 exited {MAX_CELL_FAILURES} times (last exit code 9); "
                             "see its step log")


def test_a_step_that_ended_on_a_lost_cell_is_not_a_failure_but_a_loss_next_round():
    seen = Observation(steps=statuses(s0=RUNNING, s1=FAILED), lost_later=frozenset({1}))
    assert recover(state_of(*SERVING), seen) == []
    starting = state_of(Phase.STARTING, Phase.ROLLOUT)
    assert recover(starting, Observation(steps=statuses(s0=FAILED, s1=RUNNING), lost_later=frozenset({0}))) == []


def test_a_failed_training_member_retries_the_step_on_the_same_cells():
    seen = Observation(steps=statuses(s0=RUNNING), training=members(t2=FAILED, t1=RUNNING, t3=SUCCEEDED))
    state = state_of(*TRAINING, train=(2, 1, 3), attempt=1)
    assert recover(state, seen) == [RetryTraining(index=2, cells=(2, 1, 3), attempt=2, failed=((2, "t2", 9),),
                                                  stop=("t1",))]


def test_the_last_attempt_of_a_training_step_ends_the_run():
    seen = Observation(steps=statuses(s0=RUNNING), training=members(t1=FAILED))
    state = state_of(Phase.ROLLOUT, Phase.TRAIN, train=(1,), attempt=MAX_TRAIN_ATTEMPTS - 1)
    assert recover(state, seen) == [GiveUp(f"training step 2 failed {MAX_TRAIN_ATTEMPTS} times; see "
                                           "logs/train-step2-cell*.log")]


def test_a_training_member_on_a_lost_cell_is_not_retried():
    seen = Observation(steps=statuses(s0=RUNNING), training=members(t1=FAILED, t2=RUNNING),
                       lost_later=frozenset({2}))
    assert recover(state_of(*TRAINING[:3], train=(1, 2)), seen) == []


def test_a_succeeded_training_step_ends_and_stops_members_still_joining():
    seen = Observation(steps=statuses(s0=RUNNING), training=members(t1=SUCCEEDED, t2=RUNNING))
    assert recover(state_of(*TRAINING[:3], train=(1, 2)), seen) == [EndTraining(index=2, stop=("t2",))]
    running = Observation(steps=statuses(s0=RUNNING))  # the first member still runs: nothing was read
    assert recover(state_of(*TRAINING[:3], train=(1, 2)), running) == []


def test_a_lost_cell_in_training_stops_every_member_and_gives_the_batch_back():
    seen = Observation(lost=frozenset({3, 2}))  # one at a time, lowest first
    assert recover(state_of(*TRAINING, train=(1, 2)), seen) == [LoseCell(cell=2, stop=("t1", "t2"), release=2)]
    serving_lost = LoseCell(cell=1, stop=("s1",), release=None)
    assert recover(state_of(*SERVING), Observation(lost=frozenset({1}))) == [serving_lost]
    known = state_of(Phase.ROLLOUT, Phase.LOST)
    assert recover(known, Observation(lost=frozenset({1}), steps=statuses(s0=RUNNING))) == []  # answered already


def test_a_lost_cell_with_granted_nodes_is_placed():
    nodes = (Node("node9", 1, 0, 4, address="10.0.0.9"),)
    seen = Observation(lost=frozenset({1}), granted={1: nodes}, steps=statuses(s0=RUNNING))
    assert recover(state_of(Phase.ROLLOUT, Phase.LOST), seen) == [PlaceCell(cell=1, nodes=nodes)]


def test_a_drained_cell_stops_its_server_once_it_holds_no_sessions():
    state = state_of(Phase.ROLLOUT, Phase.DRAINING)
    drained, busy = (Observation(steps=statuses(s0=RUNNING), sessions={1: n}) for n in (0, 2))
    assert recover(state, drained) == [StopDrained(cell=1, step_id="s1")]
    assert recover(state, busy) == []


def test_a_started_server_is_routed_once_it_answers_and_ends_the_run_if_it_exits():
    state = state_of(Phase.STARTING, Phase.RETURNING)
    seen = Observation(steps=statuses(s0=RUNNING, s1=RUNNING), ready=frozenset({1}))
    assert recover(state, seen) == [RouteServer(cell=1, step_id="s1", weight_version=1)]
    [give_up] = recover(state, Observation(steps=statuses(s0=FAILED, s1=RUNNING)))
    assert give_up == GiveUp("the rollout server of cell 0 exited while starting (failed, exit code 9); "
                             "see its step log")


class ScriptedCluster(Cluster):
    """Step states as given; cells ``lost`` are lost; remembers every read."""

    backend = "scripted"

    def __init__(self, states: dict[str, StepState], lost: frozenset[int] = frozenset({3})) -> None:
        self.states, self.lost, self.reads = states, lost, []

    def discover(self):
        return []

    def start_step(self, spec):
        raise AssertionError("reading the world starts nothing")

    def stop_step(self, step_id, *, grace_s=5.0):
        raise AssertionError("reading the world stops nothing")

    def step_status(self, step_id):
        self.reads.append(step_id)
        return StepStatus(step_id, self.states.get(step_id, RUNNING))

    def lost_cells(self):
        self.reads.append("lost")
        return set(self.lost)

    def replacement(self, cell):
        self.reads.append(f"replacement{cell}")
        return None


class Servers:
    def sessions(self, cell):
        return 0

    def ready(self, cell):
        return True


def test_read_world_reads_a_new_loss_alone_and_training_members_once_the_step_ended():
    known = state_of(Phase.ROLLOUT, Phase.TRAIN, Phase.TRAIN, Phase.LOST, train=(1, 2))
    cluster = ScriptedCluster({}, lost=frozenset({2, 3}))
    assert (read_world(known, cluster=cluster, servers=Servers(), trainers=RecordingTrainers(), now=0.0)
            == Observation(lost=frozenset({2, 3})))
    assert cluster.reads == ["lost"]  # cell 3's replacement is not asked for a round early, no step is read
    cluster = ScriptedCluster({})
    seen = read_world(known, cluster=cluster, servers=Servers(), trainers=RecordingTrainers(), now=0.0)
    assert cluster.reads == ["lost", "replacement3", "s0", "t1"] and seen.training == ()
    cluster = ScriptedCluster({"t1": SUCCEEDED})
    seen = read_world(known, cluster=cluster, servers=Servers(), trainers=RecordingTrainers(), now=0.0)
    assert [s.step_id for s in seen.training] == ["t1", "t2"] and cluster.reads[-1] == "lost"
