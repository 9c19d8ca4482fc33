"""Timeline PNG of cell roles over time (``simulate --timeline``, ``status --timeline``), drawn
with matplotlib from the coordinator's spans (:func:`gyrectl.coordinator.timeline.role_segments`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gyrectl.coordinator.events import Event
from gyrectl.coordinator.state import CoordinatorState
from gyrectl.coordinator.timeline import role_segments

_COLORS = {"rollout": "tab:blue", "training": "tab:orange", "waiting to train": "wheat", "switching": "tab:gray",
           "idle": "white", "lost": "black"}


def draw_timeline(path: Path, *, initial: CoordinatorState, events: list[Event], title: str,
                  wall_clock: bool = False, marks: Sequence[tuple[float, str]] = ()) -> None:
    """Simulated events are drawn in hours from 0; a real run's (``wall_clock``) in minutes
    from its first event. ``marks``: (time, label) drawn as labelled vertical lines (a real run's
    evaluations)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    num_cells = len(initial.cells)
    origin, unit, axis = (events[0].at, 60, "minutes since the run started") if wall_clock and events else (
        0.0, 3600, "hours (simulated)")
    fig, ax = plt.subplots(figsize=(12, 0.35 * num_cells + 2.0))
    for cell, label, start, end in role_segments(initial, events, origin):
        ax.broken_barh([(start / unit, (end - start) / unit)], (cell - 0.4, 0.8), color=_COLORS[label])
    for at, label in marks:
        ax.axvline((at - origin) / unit, color="tab:green", lw=1, ls="--")
        ax.text((at - origin) / unit, num_cells - 0.4, label, color="tab:green", fontsize=7, rotation=90,
                va="top", ha="right")
    ax.set_xlabel(axis)
    ax.set_ylabel("cell")
    ax.set_yticks(range(num_cells))
    ax.set_title(title)
    fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, ec="k", lw=0.3) for c in _COLORS.values()],
               labels=list(_COLORS), loc="lower center", ncol=len(_COLORS), fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))  # room below the axis label for the legend
    fig.savefig(path, dpi=110)
    plt.close(fig)
