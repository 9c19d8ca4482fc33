"""The ``cells`` and ``moves`` of ``status --json``, from coordinator state and events, and the
fault events' folds (a failed step counted, a retried training step keeping its batch)."""

from __future__ import annotations

from gyrectl.coordinator.events import (
    PhaseChanged,
    StepFailed,
    TrainEnded,
    TrainRetried,
    TrainStarted,
    apply,
    from_record,
    to_record,
)
from gyrectl.coordinator.journal import replay
from gyrectl.coordinator.state import Limits, Phase, initial_state
from gyrectl.coordinator.views import cell_rows, moves

LIMITS = Limits(num_cells=2, slots_per_cell=4, batch_executions=4, max_staleness=0)


def test_moves_each_way_with_durations_and_one_under_way() -> None:
    events = [PhaseChanged(cell=1, phase=Phase.STARTING, at=0.0, step_id="s1"),
              PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=30.0, step_id="s1"),
              PhaseChanged(cell=1, phase=Phase.DRAINING, at=40.0, step_id="s1"),
              PhaseChanged(cell=1, phase=Phase.TRAIN, at=40.5),
              PhaseChanged(cell=1, phase=Phase.RETURNING, at=50.0, step_id="s2"),
              PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=80.0, step_id="s2"),
              PhaseChanged(cell=1, phase=Phase.DRAINING, at=90.0, step_id="s2")]
    assert [m.to_json() for m in moves(events)] == [
        {"cell": 1, "from": "rollout", "to": "train", "at": 40.0, "duration_s": 0.5, "warm": False, "ready_s": 0.5},
        {"cell": 1, "from": "train", "to": "rollout", "at": 50.0, "duration_s": 30.0, "warm": False, "ready_s": 30.0},
        {"cell": 1, "from": "rollout", "to": "train", "at": 90.0, "duration_s": None, "warm": False, "ready_s": None},
    ]


def test_a_server_that_sleeps_and_wakes_makes_warm_moves_and_shows_its_engine() -> None:
    events = [PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=30.0, step_id="s1", weight_version=2),
              PhaseChanged(cell=1, phase=Phase.DRAINING, at=40.0, step_id="s1", weight_version=2),
              PhaseChanged(cell=1, phase=Phase.TRAIN, at=40.5, weight_version=2, warm=True, sleeping_server="s1")]
    asleep = replay(events, LIMITS)
    assert cell_rows(asleep, [("n2",), ("n3",)])[1].engine == "asleep"
    events += [PhaseChanged(cell=1, phase=Phase.RETURNING, at=50.0, step_id="s1", weight_version=2, warm=True)]
    assert cell_rows(replay(events, LIMITS), [("n2",), ("n3",)])[1].engine == "awake"
    events += [PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=51.5, step_id="s1", weight_version=3)]
    assert [(m.warm, m.ready_s) for m in moves(events)] == [(True, 0.5), (True, 1.5)]
    cold = [PhaseChanged(cell=1, phase=Phase.RETURNING, at=50.0, step_id="s2")]
    assert cell_rows(replay(cold, LIMITS), [("n2",), ("n3",)])[1].engine == "cold"


def test_cell_rows_show_role_phase_and_served_weights() -> None:
    events = [PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=5.0, step_id="a", weight_version=3),
              PhaseChanged(cell=1, phase=Phase.TRAIN, at=6.0)]
    rows = cell_rows(replay(events, LIMITS), [("n2",), ("n3",)])
    assert [r.to_json() for r in rows] == [
        {"id": 0, "nodes": ["n2"], "role": "rollout", "phase": "rollout", "since": 5.0, "weight_version": 3,
         "in_training_step": False, "engine": "awake"},
        {"id": 1, "nodes": ["n3"], "role": "train", "phase": "train", "since": 6.0, "weight_version": None,
         "in_training_step": False, "engine": "cold"},
    ]


def test_a_retried_training_step_keeps_its_batch_and_counts_the_failure() -> None:
    state = initial_state(LIMITS)
    state = apply(state, PhaseChanged(cell=1, phase=Phase.TRAIN, at=1.0))
    state = state.__class__(**{**state.__dict__, "buffer": ((0, 0, 4),), "finished": 4, "dispatched": 4})
    state = apply(state, TrainStarted(index=0, cells=(1,), take=((0, 0, 4),), at=2.0, step_ids=("t0",)))
    retry = [StepFailed(cell=1, step_id="t0", role="train", exit_code=137, at=3.0),
             TrainRetried(index=0, at=3.1, step_ids=("t0b",))]
    for event in retry:
        assert from_record(to_record(event)) == event  # journaled and replayed alike
        state = apply(state, event)
    assert state.train is not None and state.train.attempt == 1 and state.trained == 4
    assert state.cells[1].step_id == "t0b" and state.cells[1].failures == 1
    state = apply(state, TrainEnded(index=0, at=9.0))
    assert state.version == 1 and state.trained == 4
