"""Timeline PNG of cell roles over time, drawn from a run's events: a simulation's (virtual
seconds from 0) or a real run's journal (wall-clock times, drawn from the first event on)."""

from __future__ import annotations

from pathlib import Path

from gyrectl.coordinator.events import Event, apply
from gyrectl.coordinator.state import CoordinatorState, Phase

_COLORS = {"rollout": "tab:blue", "training": "tab:orange", "waiting to train": "wheat", "switching": "tab:gray",
           "idle": "white", "lost": "black"}


def _label(state: CoordinatorState, cell: int) -> str:
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


def draw_timeline(path: Path, *, initial: CoordinatorState, events: list[Event], title: str,
                  wall_clock: bool = False) -> None:
    """Simulated events are drawn in hours from 0; a real run's (``wall_clock``) in minutes
    from its first event."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    num_cells = len(initial.cells)
    origin, unit, axis = (events[0].at, 60, "minutes since the run started") if wall_clock and events else (
        0.0, 3600, "hours (simulated)")
    fig, ax = plt.subplots(figsize=(12, 0.35 * num_cells + 2.0))
    for cell, label, start, end in role_segments(initial, events, origin):
        ax.broken_barh([(start / unit, (end - start) / unit)], (cell - 0.4, 0.8), color=_COLORS[label])
    ax.set_xlabel(axis)
    ax.set_ylabel("cell")
    ax.set_yticks(range(num_cells))
    ax.set_title(title)
    fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, ec="k", lw=0.3) for c in _COLORS.values()],
               labels=list(_COLORS), loc="lower center", ncol=len(_COLORS), fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # room below the axis label for the legend
    fig.savefig(path, dpi=110)
    plt.close(fig)
