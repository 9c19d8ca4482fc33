"""The coordinator's two narrow views of the world besides the ``Cluster``: the gateway that owns
executions and routing, and the clock it waits on. Real ones talk HTTP and sleep; the simulated
ones (:mod:`gyrectl.sim.gateway`) share a virtual clock with the simulated cluster."""

from __future__ import annotations

from typing import Protocol

from gyrectl.coordinator.events import Event


class RolloutGateway(Protocol):
    def dispatch(self, *, count: int, version: int) -> None:
        """Starts ``count`` new executions (the next sequence numbers) on routed servers."""

    def ready(self, cell: int) -> bool:
        """Whether the cell's started server answers (its engine has loaded the weights)."""

    def route(self, cell: int, *, routed: bool, weight_version: int = 0) -> None:
        """Adds a cell's server (serving ``weight_version``) to the routing, or drains it (its
        executions move on between calls)."""

    def sessions(self, cell: int) -> int:
        """Executions the cell's server still holds (0 once a drained cell may stop)."""

    def sync_weights(self, cell: int, version: int) -> None:
        """Makes the cell's server load weights ``version``; reported by ``WeightsSynced``."""

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> str:
        """Reserves the finished executions ``take`` for training step ``index``; names the batch."""

    def release(self, *, index: int) -> None:
        """Gives back what ``claim`` reserved for step ``index`` (the step was abandoned when a
        cell in it was lost); the step's next claim may take the same executions again."""

    def place(self, cell: int, url: str) -> None:
        """The cell's server is now reached at ``url`` (a lost cell placed on new nodes)."""

    def poll(self) -> list[Event]:
        """``Started``, ``Finished`` and ``WeightsSynced`` events since the last poll."""


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on the coordinator's clock."""

    def wait(self) -> None:
        """Blocks until something may have changed (real: a poll interval; simulated: next event)."""
