"""The simulated world's virtual clock: a queue of timers, run one at a time, the clock jumping to
each. It is the coordinator's ``Clock`` port too: ``wait`` runs timers until one changed something."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from gyrectl.errors import RuntimeFailure


class VirtualClock:
    def __init__(self, start_s: float = 0.0) -> None:
        self.time = start_s
        """Seconds since the simulated run began (``now()`` for the coordinator); a world that takes
        over a run (:func:`gyrectl.sim.run.resumed_world`) goes on from its previous world's time."""
        self.events_processed = 0
        """Live timers run so far (superseded ones are not counted)."""
        self._queue: list[tuple[float, int, Callable[..., bool], tuple]] = []
        self._tie = itertools.count()

    def at(self, delay_s: float, fn: Callable[..., bool], *args: object) -> None:
        """Runs ``fn(*args)`` ``delay_s`` from now; ``fn`` returns whether it was live (not superseded).
        Timers due at the same time run in the order they were set."""
        heapq.heappush(self._queue, (self.time + delay_s, next(self._tie), fn, args))

    def advance(self) -> bool:
        """Runs the next timer; the clock jumps to it. False: the timer was superseded (a timer
        of a server whose load changed since), which changes nothing."""
        if not self._queue:
            raise RuntimeFailure("simulation stalled: nothing is running and the policy asks for nothing")
        self.time, _, fn, args = heapq.heappop(self._queue)
        live = fn(*args)
        self.events_processed += live
        return live

    def now(self) -> float:
        return self.time

    def wait(self) -> None:
        # Superseded timers (most of the queue at scale) change nothing: the coordinator gets no
        # round for them, as a real one never sees them.
        while not self.advance():
            pass
