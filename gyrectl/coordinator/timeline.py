"""Cell roles over time as spans, from a run's events: a simulation's (virtual seconds from 0) or a
real run's journal (wall-clock times). Pure data; the CLI draws it (:mod:`gyrectl.cli.timeline`),
so the coordinator never imports a plotting library."""

from __future__ import annotations

from gyrectl.coordinator.events import Event, apply
from gyrectl.coordinator.state import CoordinatorState, Phase


def _label(state: CoordinatorState, cell: int) -> str:
    """What the cell does, in the words the timeline's legend uses."""
    phase = state.cells[cell].phase
    if phase is Phase.TRAIN:
        return "training" if state.train is not None and cell in state.train.cells else "waiting to train"
    if phase in (Phase.STARTING, Phase.DRAINING, Phase.RETURNING):
        return "switching"
    return phase.value


def role_segments(initial: CoordinatorState, events: list[Event],
                  origin: float = 0.0) -> list[tuple[int, str, float, float]]:
    """``(cell, label, start, end)`` spans in seconds since ``origin``, by folding the events
    through the coordinator's own ``apply``."""
    state, now = initial, origin
    current = {c: ("idle", origin) for c in range(len(initial.cells))}
    segments = []
    for event in events:
        state, now = apply(state, event), event.at
        for cell, (label, since) in current.items():
            new = _label(state, cell)
            if new != label:
                segments.append((cell, label, since, now))
                current[cell] = (new, now)
    segments += [(cell, label, since, now) for cell, (label, since) in current.items()]
    return [(cell, label, start - origin, end - origin) for cell, label, start, end in segments if end > start]

