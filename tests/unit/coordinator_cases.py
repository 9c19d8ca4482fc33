"""Small simulated runs shared by the coordinator and scheduler tests, and the invariant checker
that replays a run's events and fails on the first broken rule."""

from __future__ import annotations

from collections import Counter

from gyrectl.config import parse_config
from gyrectl.config.schema import Config
from gyrectl.coordinator.events import Event, Finished, PhaseChanged, TrainExtended, TrainStarted, apply
from gyrectl.coordinator.state import CoordinatorState, Phase, initial_state
from gyrectl.sim.run import simulated_limits
from gyrectl.sim.workload import Workload


def small_config(*, policy: str = "elastic", cells: int = 4, slots: int = 4, batch: int = 8, steps: int = 4,
                 staleness: int = 1, movable: bool = True, order: str = "completion", train_cells: int = 1,
                 min_rollout: int = 0, time_limit_s: float = 600.0, group: int = 1) -> Config:
    return parse_config({
        "run": {"steps": steps},
        "cluster": {"nodes": cells, "gpus_per_node": 8},
        "cells": {"nodes_per_cell": 1},
        "rollout": {"concurrency_per_server": slots, "executions_per_task": group,
                    "execution_time_limit_s": time_limit_s},
        "training": {"batch_executions": batch},
        "scheduler": {"policy": policy, "max_staleness": staleness, "async_train_cells": train_cells,
                      "min_rollout_cells": min_rollout, "batch_order": order},
        "simulator": {"executions_movable": movable, "train_tokens_per_s_per_gpu": 50.0},
    })


def workload(durations: list[float]) -> Workload:
    return Workload(name="test", duration_s=tuple(durations), tokens=tuple(int(d * 100) for d in durations))


def check_invariants(config: Config, events: list[Event]) -> CoordinatorState:
    """Replays ``events`` and asserts the rules every policy must keep; returns the final state."""
    state = initial_state(simulated_limits(config))
    slots = state.limits.slots_per_cell
    finished: Counter[int] = Counter()
    for event in events:
        if isinstance(event, PhaseChanged) and event.phase is Phase.DRAINING:
            serving = state.phase_count(Phase.ROLLOUT)
            assert state.phase_count(Phase.DRAINING) == 0 or config.scheduler.policy == "colocate", \
                "two cells left rollout at once"
            assert state.in_flight <= (serving - 1) * slots, (
                f"capacity rule broken: w={state.in_flight} > C_R - C_cell = ({serving} - 1) x {slots}")
            if config.scheduler.policy == "elastic":  # the standalone pool is an elastic option
                assert serving - 1 >= state.limits.min_rollout_cells, "a cell of the standalone rollout pool left"
        if isinstance(event, TrainStarted):
            size = state.limits.group_size
            assert all(count % size == 0 for _, _, count in event.take), "a step took part of a group"
        if isinstance(event, TrainStarted | TrainExtended):
            cells = event.cells if isinstance(event, TrainStarted) else (event.cell,)
            assert all(state.cells[c].phase is Phase.TRAIN for c in cells), "a cell trains while serving"
        if isinstance(event, Finished):
            finished[event.seq] += 1
        state = apply(state, event)
        if state.train is not None:
            assert all(state.cells[c].phase is Phase.TRAIN for c in state.train.cells), "a cell serves and trains"
    total = state.limits.total_executions
    assert sorted(finished) == list(range(total)) and set(finished.values()) == {1}, "an execution lost or doubled"
    assert state.dispatched == state.finished == state.trained == total and state.buffered == 0
    assert not state.open_groups, "a group never became whole"
    return state


class Unused:
    """A port the test's actuator must not touch: any use of it fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"the actuator used {name!r} of a port this test gives it nothing for")


class RecordingTrainers:
    """A ``ResidentTrainers`` port that records the requests; the steps in ``done`` are committed."""

    def __init__(self, done: tuple[int, ...] = ()):
        self.requests: list[tuple[int, str]] = []
        self.done = set(done)

    def request(self, *, index: int, group: str) -> None:
        self.requests.append((index, group))

    def committed(self, index: int) -> bool:
        return index in self.done
