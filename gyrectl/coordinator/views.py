"""What ``gyrectl status`` shows of the coordinator, as pure functions of its state and events:
one row per cell, the moves cells made between roles, the training step under way and the
execution counts (the ``cells``, ``moves``, ``training`` and ``executions`` keys of
``status --json``). Each is a frozen record; its ``to_json`` is the ``--json`` contract."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gyrectl.coordinator.events import CellLost, CellPlaced, Event, PhaseChanged
from gyrectl.coordinator.state import CellState, CoordinatorState, Phase

_ROLE = {Phase.IDLE: "idle", Phase.STARTING: "rollout", Phase.ROLLOUT: "rollout", Phase.DRAINING: "rollout",
         Phase.RETURNING: "rollout", Phase.TRAIN: "train", Phase.LOST: "lost"}
"""The kind of step running on a cell in each phase: a vLLM server from the moment it starts
(``starting``, ``returning``) until it is stopped (the end of ``draining``)."""

_SERVES = (Phase.ROLLOUT, Phase.DRAINING)


@dataclass(frozen=True)
class CellRow:
    id: int
    nodes: tuple[str, ...]
    role: str
    """``idle``, ``rollout``, ``train`` or ``lost``: the kind of step on the cell."""
    phase: str
    since: float
    weight_version: int | None
    """The weights its server serves; None while no server serves."""
    in_training_step: bool
    engine: str = "cold"
    """The cell's vLLM engine: ``awake`` (serving, draining, or woken and loading the newest
    weights), ``asleep`` (kept through training), ``cold`` (none, or one cold-starting)."""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "nodes": list(self.nodes), "role": self.role, "phase": self.phase,
                "since": self.since, "weight_version": self.weight_version, "in_training_step": self.in_training_step,
                "engine": self.engine}


@dataclass(frozen=True)
class Move:
    """A cell's move between roles; ``from_role`` is ``from`` in JSON (a Python keyword)."""

    cell: int
    from_role: str
    to: str
    at: float
    duration_s: float | None
    """None while the move is under way."""
    warm: bool = False
    """No engine or trainer process was started for the move: the server went to sleep (to
    ``train``) or woke up (to ``rollout``) instead of stopping or cold-starting."""

    @property
    def ready_s(self) -> float | None:
        """From the decision until the cell serves (to ``rollout``) or is free to train (to
        ``train``): the move's duration."""
        return self.duration_s

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "from": self.from_role, "to": self.to, "at": self.at, "duration_s": self.duration_s,
                "warm": self.warm, "ready_s": self.ready_s}


@dataclass(frozen=True)
class TrainingRow:
    """The training step under way."""

    index: int
    cells: tuple[int, ...]
    executions: int
    started_at: float

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "cells": list(self.cells), "executions": self.executions,
                "started_at": self.started_at}


@dataclass(frozen=True)
class ExecutionCounts:
    dispatched: int
    in_flight: int
    finished: int
    trained: int
    """Executions trained on (infrastructure failures never are)."""
    infra_failures: int = 0
    """Executions that ended without a reward (the harness printed no output, the verifier failed)."""
    uniform_skipped: int = 0
    """Executions of groups without a learning signal kept out of training (``training.skip_uniform_groups``)."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def cell_rows(state: CoordinatorState, cell_nodes: Sequence[Sequence[str]]) -> list[CellRow]:
    """One row per cell, with whether it is in the running training step."""
    training = set(state.train.cells) if state.train is not None else set()
    return [CellRow(id=cell.id, nodes=tuple(cell_nodes[cell.id]) if cell.id < len(cell_nodes) else (),
                    role=_ROLE[cell.phase], phase=cell.phase.value, since=cell.since,
                    weight_version=cell.weight_version if cell.phase in _SERVES else None,
                    in_training_step=cell.id in training, engine=engine(cell))
            for cell in state.cells]


def engine(cell: CellState) -> str:
    """``awake``, ``asleep`` or ``cold``: see :attr:`CellRow.engine`."""
    if cell.sleeping_server:
        return "asleep"
    if cell.phase in _SERVES or (cell.phase is Phase.RETURNING and cell.warm):
        return "awake"
    return "cold"


def training_row(state: CoordinatorState) -> TrainingRow | None:
    train = state.train
    return None if train is None else TrainingRow(index=train.index, cells=tuple(train.cells),
                                                  executions=train.executions, started_at=train.started_at)


def execution_counts(state: CoordinatorState) -> ExecutionCounts:
    return ExecutionCounts(dispatched=state.dispatched, in_flight=state.in_flight, finished=state.finished,
                           trained=state.trained - state.left_out, infra_failures=state.infra_failures,
                           uniform_skipped=state.skipped_uniform)


def placed_cells(events: Sequence[Event], discovered: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Each cell's nodes: as discovered, then wherever a lost cell was placed again."""
    nodes = list(discovered)
    for event in events:
        if isinstance(event, CellPlaced):
            nodes[event.cell] = event.nodes
    return nodes


def moves(events: Sequence[Event]) -> list[Move]:
    """Every move between roles, oldest first: ``rollout`` -> ``train`` from the moment the cell
    leaves the routing until its server step is gone, ``train`` -> ``rollout`` from the moment its
    server starts until it serves."""
    found: list[Move] = []
    under_way: dict[int, int] = {}  # cell -> its move's index in found
    for event in events:
        if not isinstance(event, PhaseChanged | CellLost):
            continue
        phase = event.phase if isinstance(event, PhaseChanged) else Phase.LOST
        if phase in (Phase.DRAINING, Phase.RETURNING):
            under_way[event.cell] = len(found)
            found.append(Move(cell=event.cell, from_role="rollout" if phase is Phase.DRAINING else "train",
                              to="train" if phase is Phase.DRAINING else "rollout", at=event.at, duration_s=None,
                              warm=phase is Phase.RETURNING and event.warm))
        elif (i := under_way.pop(event.cell, None)) is not None:
            move = found[i]
            # A move that ended elsewhere (the cell was lost on the way) ends in that role.
            found[i] = dataclasses.replace(move, to=move.to if phase.value == move.to else _ROLE[phase],
                                           duration_s=round(event.at - move.at, 3),
                                           warm=move.warm or (phase is Phase.TRAIN and event.warm))
    return found
