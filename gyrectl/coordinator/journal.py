"""The run journal: every coordinator event, one fsync'd JSON line each, in the order applied.

A restarted coordinator calls :func:`replay` and gets the very state it had when it stopped
(the policy being pure, it then makes the same decisions).
"""

from __future__ import annotations

from functools import reduce
from pathlib import Path

from gyrectl.coordinator.events import Event, apply, from_record, is_event_record, to_record
from gyrectl.coordinator.state import CoordinatorState
from gyrectl.store.jsonl import JsonlAppender, read_records


class Journal:
    """Appends events to ``path`` (the run directory's journal)."""

    def __init__(self, path: Path, *, fsync: bool = True):
        self._appender = JsonlAppender(path, fsync=fsync)

    def append(self, event: Event) -> None:
        self._appender.append(to_record(event))

    def close(self) -> None:
        self._appender.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_events(path: Path) -> list[Event]:
    """The coordinator's events in ``path`` (the head's own records there, such as
    ``head_started``, are skipped)."""
    return [from_record(record) for record in read_records(path) if is_event_record(record)]


def replay(path: Path, initial: CoordinatorState) -> CoordinatorState:
    """``initial`` with every journaled event of ``path`` applied."""
    return reduce(apply, read_events(path), initial)
