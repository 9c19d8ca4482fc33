"""What one run shows, measured the same way from a real run's journal and from a simulated run's
events, so that the two can stand side by side:

* ``makespan_s``: from the first execution dispatched to the last step's commit (``TrainEnded``);
* ``from_start_s``: from the run's first event (its cells starting) to the last commit: what
  ``gyrectl simulate``'s own ``makespan_s`` measures (its clock starts with the cold cells);
* ``idle_share``: the share of all cells' time in that window spent neither serving rollouts nor
  training (starting, switching, waiting to train, idle): the coordinator's own timeline labels
  (:func:`gyrectl.coordinator.timeline.role_segments`);
* ``trained`` executions (infrastructure failures left out) and ``trained_per_hour`` over ``makespan_s``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gyrectl.coordinator.events import Dispatched, Event, TrainEnded, apply
from gyrectl.coordinator.state import CoordinatorState
from gyrectl.coordinator.timeline import role_segments

BUSY = ("rollout", "training")


@dataclass(frozen=True)
class RunFigures:
    makespan_s: float
    from_start_s: float
    idle_share: float
    trained: int
    trained_per_hour: float
    steps: int

    def as_dict(self) -> dict:
        return asdict(self)


def run_figures(events: list[Event], initial: CoordinatorState) -> RunFigures:
    """``events``: a run's, oldest first (a real journal's or a simulation's); ``initial``: the
    coordinator's state before them (``initial_state(limits_from_config(config))``)."""
    ends = [e.at for e in events if isinstance(e, TrainEnded)]
    dispatched = [e.at for e in events if isinstance(e, Dispatched)]
    if not ends or not dispatched:
        raise ValueError("the run trained no step: nothing to measure")
    first, last = dispatched[0], ends[-1]
    busy = total = 0.0
    for _, label, a, b in role_segments(initial, events, origin=0.0):
        overlap = min(b, last) - max(a, first)
        if overlap > 0:
            total += overlap
            busy += overlap if label in BUSY else 0.0
    state = initial
    for event in events:
        state = apply(state, event)
    makespan, trained = last - first, state.trained - state.left_out  # infrastructure failures trained nothing
    return RunFigures(makespan_s=round(makespan, 2), from_start_s=round(last - events[0].at, 2),
                      idle_share=round(1 - busy / total, 4) if total else 1.0, trained=trained,
                      trained_per_hour=round(trained / makespan * 3600, 1) if makespan else 0.0, steps=len(ends))
