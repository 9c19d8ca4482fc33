"""The simulated gateway, clock and resident trainers: the coordinator's ``RolloutGateway``,
``Clock`` and ``ResidentTrainers`` over the simulated world (executions are virtual; time is the
world's virtual clock)."""

from __future__ import annotations

from collections.abc import Sequence

from gyrectl.cluster.base import Node
from gyrectl.coordinator.events import Event
from gyrectl.sim.world import SimulatedWorld


class SimulatedGateway:
    def __init__(self, world: SimulatedWorld):
        self._world = world

    def dispatch(self, *, count: int, version: int) -> None:
        self._world.dispatch(count=count, version=version)

    def ready(self, cell: int) -> bool:
        # A started server's step start time already includes its engine's; a woken one answers
        # once its wake-up is over.
        return self._world.awake(cell)

    def route(self, cell: int, *, routed: bool, weight_version: int = 0) -> None:
        self._world.route(cell, routed=routed)

    def sleep(self, cell: int, *, level: int) -> None:
        pass  # a drained simulated server holds nothing; its wake-up is timed by wake

    def wake(self, cell: int) -> None:
        self._world.wake(cell)

    def sessions(self, cell: int) -> int:
        return self._world.sessions(cell)

    def sync_weights(self, cell: int, version: int) -> None:
        self._world.sync_weights(cell, version)

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> int:
        self._world.claim(index=index, take=take)
        return 0  # a simulated execution always ends with a reward

    def release(self, *, index: int) -> None:
        self._world.release(index=index)

    def place(self, cell: int, nodes: Sequence[Node]) -> None:
        pass  # a simulated server has no address: the world routes by cell

    def poll(self) -> list[Event]:
        events, self._world.outbox = self._world.outbox, []
        return events

    def now(self) -> float:
        return self._world.now

    def wait(self) -> None:
        # Superseded timers (most of the queue at scale) change nothing: the coordinator gets no
        # round for them, as a real one never sees them.
        while not self._world.advance():
            pass


class SimulatedTrainers:
    def __init__(self, world: SimulatedWorld):
        self._world = world

    def request(self, *, index: int, group: str) -> None:
        self._world.request_training(index=index, group=group)

    def committed(self, index: int) -> bool:
        return self._world.committed(index)
