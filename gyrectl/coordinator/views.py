"""What ``gyrectl status`` shows of the coordinator, as pure functions of its state and events:
one row per cell, and the moves cells made between roles (the ``cells`` and ``moves`` keys of
``status --json``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gyrectl.coordinator.events import CellLost, CellPlaced, Event, PhaseChanged
from gyrectl.coordinator.state import CoordinatorState, Phase

_ROLE = {Phase.IDLE: "idle", Phase.STARTING: "rollout", Phase.ROLLOUT: "rollout", Phase.DRAINING: "rollout",
         Phase.RETURNING: "rollout", Phase.TRAIN: "train", Phase.LOST: "lost"}
"""The kind of step running on a cell in each phase: a vLLM server from the moment it starts
(``starting``, ``returning``) until it is stopped (the end of ``draining``)."""

_SERVES = (Phase.ROLLOUT, Phase.DRAINING)


def cell_rows(state: CoordinatorState, cell_nodes: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """``id``, ``nodes``, ``role``, ``phase``, ``since`` and ``weight_version`` (the weights its
    server serves; null while no server serves), plus whether it is in the running training step."""
    training = set(state.train.cells) if state.train is not None else set()
    return [{"id": cell.id, "nodes": list(cell_nodes[cell.id]) if cell.id < len(cell_nodes) else [],
             "role": _ROLE[cell.phase], "phase": cell.phase.value, "since": cell.since,
             "weight_version": cell.weight_version if cell.phase in _SERVES else None,
             "in_training_step": cell.id in training}
            for cell in state.cells]


def placed_cells(events: Sequence[Event], discovered: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Each cell's nodes: as discovered, then wherever a lost cell was placed again."""
    nodes = list(discovered)
    for event in events:
        if isinstance(event, CellPlaced):
            nodes[event.cell] = event.nodes
    return nodes


def moves(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Every move between roles, oldest first: ``rollout`` -> ``train`` from the moment the cell
    leaves the routing until its server step is gone, ``train`` -> ``rollout`` from the moment its
    server starts until it serves. ``duration_s`` is null for a move still under way."""
    found: list[dict[str, Any]] = []
    under_way: dict[int, dict[str, Any]] = {}
    for event in events:
        if not isinstance(event, PhaseChanged | CellLost):
            continue
        phase = event.phase if isinstance(event, PhaseChanged) else Phase.LOST
        if phase in (Phase.DRAINING, Phase.RETURNING):
            move = {"cell": event.cell, "from": "rollout" if phase is Phase.DRAINING else "train",
                    "to": "train" if phase is Phase.DRAINING else "rollout", "at": event.at, "duration_s": None}
            under_way[event.cell] = move
            found.append(move)
        elif (move := under_way.pop(event.cell, None)) is not None:
            if phase.value != move["to"]:  # ended elsewhere (the cell was lost on the way)
                move["to"] = _ROLE[phase]
            move["duration_s"] = round(event.at - move["at"], 3)
    return found
