"""Each policy's rules, on hand-built states (pure: no simulation)."""

from __future__ import annotations

import dataclasses

from gyrectl.coordinator.actions import Dispatch, ExtendTrain, MoveCell, StartServer, StartTrain
from gyrectl.coordinator.state import CellState, CellTable, Limits, Phase, TrainStep, initial_state
from gyrectl.scheduler import async_split, colocate, elastic

LIMITS = Limits(num_cells=4, slots_per_cell=10, batch_executions=20, max_staleness=1, total_executions=200)


def serving_state(*, in_flight: int, finished: int = 0, buffered: int = 0,
                  phases: tuple[Phase, ...] = (Phase.ROLLOUT,) * 4):
    state = initial_state(LIMITS)
    cells = CellTable(CellState(id=i, phase=p) for i, p in enumerate(phases))
    buffer = ((0, 0, buffered),) if buffered else ()
    return dataclasses.replace(state, cells=cells, dispatched=in_flight + finished, finished=finished, buffer=buffer)


def test_all_policies_start_idle_cells():
    state = initial_state(LIMITS)
    assert elastic.decide(state, 0.0) == [StartServer(cell=c) for c in range(4)]
    assert colocate.decide(state, 0.0) == [StartServer(cell=c) for c in range(4)]
    assert async_split.decide(state, 0.0) == ([StartServer(cell=c) for c in range(3)]
                                              + [MoveCell(cell=3, to=Phase.TRAIN)])


def test_elastic_keeps_cell_while_in_flight_exceeds_remaining_capacity():
    # A batch is ready, but 31 in flight > C_R - C_cell = 40 - 10: nobody may leave.
    state = serving_state(in_flight=31, finished=20, buffered=20)
    assert not [a for a in elastic.decide(state, 0.0) if isinstance(a, MoveCell)]


def test_elastic_moves_one_cell_once_work_fits_the_rest():
    state = serving_state(in_flight=20, finished=20, buffered=20)  # batch ready, budget spent; 20 <= 40 - 10
    moves = [a for a in elastic.decide(state, 0.0) if isinstance(a, MoveCell)]
    assert moves == [MoveCell(cell=3, to=Phase.TRAIN)]


def test_elastic_does_not_move_without_training_work():
    state = serving_state(in_flight=5, finished=5, buffered=5)  # no batch ready, no step running
    actions = elastic.decide(state, 0.0)
    assert not [a for a in actions if isinstance(a, MoveCell)]
    assert Dispatch(count=30, version=0) in actions  # budget (0+1+1) x 20 - 10 = 30, slots 40 - 5 = 35


def test_elastic_starts_training_on_the_pool_and_extends_it():
    phases = (Phase.ROLLOUT, Phase.ROLLOUT, Phase.ROLLOUT, Phase.TRAIN)
    state = serving_state(in_flight=20, finished=20, buffered=20, phases=phases)
    assert StartTrain(index=0, cells=(3,), take=((0, 0, 20),)) in elastic.decide(state, 0.0)
    phases = (Phase.ROLLOUT, Phase.ROLLOUT, Phase.TRAIN, Phase.TRAIN)
    running = dataclasses.replace(serving_state(in_flight=10, finished=20, phases=phases), trained=20,
                                  train=TrainStep(index=0, cells=(3,), executions=20, started_at=0.0))
    growing = dataclasses.replace(running, limits=dataclasses.replace(LIMITS, grow_running_step=True))
    assert ExtendTrain(cell=2) in elastic.decide(growing, 0.0)
    # A step whose rendezvous is fixed at its start: the freed cell waits for the next step.
    assert not [a for a in elastic.decide(running, 0.0) if isinstance(a, ExtendTrain)]


def test_elastic_keeps_the_standalone_rollout_pool():
    limits = dataclasses.replace(LIMITS, min_rollout_cells=4 - 1)
    state = dataclasses.replace(serving_state(in_flight=0, finished=40, buffered=20), limits=limits,
                                cells=CellTable(CellState(id=i, phase=Phase.ROLLOUT if i < 3 else Phase.TRAIN)
                                                for i in range(4)))
    assert not [a for a in elastic.decide(state, 0.0) if isinstance(a, MoveCell) and a.to is Phase.TRAIN]


def test_colocate_dispatches_exactly_one_batch_then_trains_everywhere():
    state = serving_state(in_flight=0)
    assert colocate.decide(state, 0.0) == [Dispatch(count=20, version=0)]
    done = serving_state(in_flight=0, finished=20, buffered=20)
    assert colocate.decide(done, 0.0) == [MoveCell(cell=c, to=Phase.TRAIN) for c in range(4)]
    half = serving_state(in_flight=1, finished=19, buffered=19)
    assert colocate.decide(half, 0.0) == []  # waits for the slowest execution


def test_async_trains_only_on_its_fixed_cells():
    phases = (Phase.ROLLOUT, Phase.ROLLOUT, Phase.ROLLOUT, Phase.TRAIN)
    state = serving_state(in_flight=20, finished=20, buffered=20, phases=phases)
    actions = async_split.decide(state, 0.0)
    assert StartTrain(index=0, cells=(3,), take=((0, 0, 20),)) in actions
    assert not [a for a in actions if isinstance(a, MoveCell)]


def test_no_policy_starts_a_step_while_the_evaluation_it_waits_for_runs():
    """eval.blocking: weights v4 are due (every 4); step 4 starts only once EvalEnded(4) is folded in."""
    from gyrectl.coordinator.events import EvalEnded, apply

    phases = (Phase.ROLLOUT, Phase.ROLLOUT, Phase.ROLLOUT, Phase.TRAIN)
    ready = dataclasses.replace(serving_state(in_flight=0, finished=100, phases=phases), version=4, trained=80,
                                buffer=((4, 4, 20),), limits=dataclasses.replace(LIMITS, eval_blocks_every=4))
    colocate_ready = dataclasses.replace(ready, cells=CellTable(CellState(id=i, phase=Phase.TRAIN) for i in range(4)))
    async_ready = ready
    decisions = {"elastic": lambda s: elastic.decide(s, 0.0), "colocate": lambda s: colocate.decide(s, 0.0),
                 "async": lambda s: async_split.decide(s, 0.0)}
    for name, state in (("elastic", ready), ("colocate", colocate_ready), ("async", async_ready)):
        assert state.awaiting_eval
        assert not [a for a in decisions[name](state) if isinstance(a, StartTrain)], name
        evaluated = apply(state, EvalEnded(version=4, at=1.0))
        assert not evaluated.awaiting_eval
        assert [a.index for a in decisions[name](evaluated) if isinstance(a, StartTrain)] == [4], name
    # v5 is not due, and without eval.blocking nothing waits.
    assert not dataclasses.replace(ready, version=5).awaiting_eval
    assert not dataclasses.replace(ready, limits=LIMITS).awaiting_eval
