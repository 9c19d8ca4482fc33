"""What the rollout side reports to the coordinator between two polls: events in the order they
happened (from the coordinator's thread and from the cells' reload threads), and the first reason
the run must stop. The reason is raised by the poll after the one that took its events, so those
are journaled first."""

from __future__ import annotations

import threading

from gyrectl.coordinator.events import Event
from gyrectl.errors import RuntimeFailure


class Outbox:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._failure = ""

    def emit(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def fail(self, reason: str) -> None:
        """The run must stop; the first reason given is the one raised."""
        with self._lock:
            self._failure = self._failure or reason

    def pending(self) -> list[Event]:
        """The events the next :meth:`drain` hands over (a copy)."""
        with self._lock:
            return list(self._events)

    def check(self) -> None:
        """Raises ``RuntimeFailure`` once the run must stop."""
        with self._lock:
            if self._failure:
                raise RuntimeFailure(self._failure)

    def drain(self) -> list[Event]:
        """The events since the last drain."""
        with self._lock:
            events, self._events = self._events, []
        return events
