"""The coordinator's main loop: decide, act, wait, fold what happened into the state, journal it.

::

    launch ──> coordinator (this loop, on the head node)
                 │  decide(state, now) -> actions           (pure policy: gyrectl.scheduler)
                 ▼
               Actuator ──Cluster──> rollout server steps (one per rollout cell)
                 │      └─Cluster──> training member steps (one per train cell, one rendezvous)
                 │      └─ports────> dispatch executions / route, drain, sync a cell / claim a batch
                 ▼
               events:  Dispatched -> Started -> Finished ──> buffer ──> TrainStarted (dedup, step)
                        PhaseChanged: idle -> starting -> rollout -> draining -> train -> returning -> rollout
                        TrainEnded -> new weights version -> SyncStarted -> WeightsSynced
                 │
                 ▼
               apply(state, event) ──> journal (fsync'd JSONL)   restart: replay(journal) -> same state

The loop does not know its backend: the same code drives Slurm steps, local processes, or the
simulated cluster on a virtual clock (``gyrectl simulate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gyrectl.coordinator.actions import Policy
from gyrectl.coordinator.actuator import Actuator
from gyrectl.coordinator.events import Event, apply
from gyrectl.coordinator.state import CoordinatorState


class EventSink(Protocol):
    def append(self, event: Event) -> None: ...


def run_coordinator(*, state: CoordinatorState, decide: Policy, actuator: Actuator, journal: EventSink,
                    now: Callable[[], float], stop: Callable[[CoordinatorState], bool] = lambda s: s.done
                    ) -> CoordinatorState:
    """Runs until ``stop(state)``; returns the final state. ``state`` may be a replayed journal."""

    def record(state: CoordinatorState, events: list[Event]) -> CoordinatorState:
        for event in events:
            state = apply(state, event)
            journal.append(event)  # after apply: a journal never holds an event the state refused
        return state

    state = record(state, actuator.observe(state))  # a restarted coordinator first catches up
    while not stop(state):
        # 1. Decide purely on what is known; 2. act, recording each action's immediate effect
        #    (a moved cell is draining at once, so the next decision sees it).
        for action in decide(state, now()):
            state = record(state, actuator.act(action, state))
        # 3. Take in what the actions changed at once (a drained cell is free); only if nothing
        #    did, wait for the world (executions finishing, steps starting and ending).
        state = record(state, actuator.observe(state) or actuator.wait(state))
    return state
