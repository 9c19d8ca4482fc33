"""The policy contract: what a policy may ask for, and the type of a policy. Small frozen records;
the coordinator's actuator carries them out through the ``Cluster`` (steps) and the gateway
(routing, executions). The policies themselves live in :mod:`gyrectl.scheduler`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gyrectl.coordinator.state import CoordinatorState, Phase


@dataclass(frozen=True)
class StartServer:
    """Cold-start a rollout server on an idle cell."""

    cell: int


@dataclass(frozen=True)
class MoveCell:
    """Move a cell to ``to`` (``Phase.TRAIN`` or ``Phase.ROLLOUT``). Leaving rollout drains the
    cell at the gateway first: its executions continue on other servers."""

    cell: int
    to: Phase


@dataclass(frozen=True)
class StartTrain:
    """Start training step ``index`` on ``cells`` with the buffered ``(batch, version, count)``."""

    index: int
    cells: tuple[int, ...]
    take: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class ExtendTrain:
    """Add a training-pool cell to the running step."""

    cell: int


@dataclass(frozen=True)
class SyncWeights:
    """Load weights ``version`` into the cell's rollout server."""

    cell: int
    version: int


@dataclass(frozen=True)
class Dispatch:
    """Hand ``count`` new executions to the gateway, served with weights ``version``."""

    count: int
    version: int


Action = StartServer | MoveCell | StartTrain | ExtendTrain | SyncWeights | Dispatch

Policy = Callable[[CoordinatorState, float], list[Action]]
"""A pure ``decide(state, now) -> actions``: what the coordinator's loop calls each round."""
