"""Timeline PNG of cell roles over time, drawn from a run's events (simulated or journaled)."""

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


def role_segments(initial: CoordinatorState, events: list[Event]) -> list[tuple[int, str, float, float]]:
    """``(cell, label, start, end)`` spans, by folding the events through the coordinator's own ``apply``."""
    state, now = initial, 0.0
    current = {c: ("idle", 0.0) for c in range(len(initial.cells))}
    segments = []
    for event in events:
        state, now = apply(state, event), event.at
        for cell, (label, since) in current.items():
            new = _label(state, cell)
            if new != label:
                segments.append((cell, label, since, now))
                current[cell] = (new, now)
    segments += [(cell, label, since, now) for cell, (label, since) in current.items()]
    return [s for s in segments if s[3] > s[2]]


def draw_timeline(path: Path, *, initial: CoordinatorState, events: list[Event], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    num_cells = len(initial.cells)
    fig, ax = plt.subplots(figsize=(12, 0.35 * num_cells + 1.5))
    for cell, label, start, end in role_segments(initial, events):
        ax.broken_barh([(start / 3600, (end - start) / 3600)], (cell - 0.4, 0.8), color=_COLORS[label])
    ax.set_xlabel("hours (simulated)")
    ax.set_ylabel("cell")
    ax.set_title(title)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c, ec="k", lw=0.3) for c in _COLORS.values()],
              labels=list(_COLORS), loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(_COLORS), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
