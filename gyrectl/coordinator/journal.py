"""The run journal: every coordinator event, one fsync'd JSON line each, in the order applied.

A restarted coordinator gets the very state it had when it stopped from :func:`replay` of the
journal's events (the policy being pure, it then makes the same decisions); ``gyrectl status``
replays them the same way, so what it shows is what a restarted coordinator would believe. A
damaged line costs only its own event: it is skipped and reported (:func:`read_journal`), the rest
is replayed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

from gyrectl.coordinator.events import Dispatched, Event, Finished, apply, from_record, is_event_record, to_record
from gyrectl.coordinator.state import CoordinatorState, Limits, initial_state
from gyrectl.store.damage import Skipped, log_skipped
from gyrectl.store.jsonl import JsonlAppender, scan_jsonl

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class JournalContents:
    events: list[Event]
    """The coordinator's events, in the order applied."""
    records: list[dict[str, Any]]
    """Every record read, the head's own (``head_started``, ``head_ended``) included."""
    skipped: list[Skipped]
    """Lines that could not be read, and event records that do not make an event."""


def read_journal(path: Path) -> JournalContents:
    contents = scan_jsonl(path)
    journal = JournalContents([], [], list(contents.skipped))
    for i, record in enumerate(contents.records):
        if is_event_record(record):
            try:
                journal.events.append(from_record(record))
            except (KeyError, TypeError, ValueError) as exc:
                journal.skipped.append(contents.refused(
                    i, f"not a valid {record['event']} event ({type(exc).__name__}: {exc})"))
                continue
        journal.records.append(record)
    return journal


def read_events(path: Path) -> list[Event]:
    """The coordinator's events in ``path`` (the head's own records there, such as
    ``head_started``, are left out; damaged lines are logged and left out)."""
    journal = read_journal(path)
    log_skipped(journal.skipped, log)
    return journal.events


def replay(events: Iterable[Event], limits: Limits) -> CoordinatorState:
    """The state of a coordinator with ``limits`` once ``events`` (a run's journal, oldest first)
    are applied, from the start of the run."""
    return reduce(apply, events, initial_state(limits))


def dispatched_and_finished(events: Iterable[Event]) -> tuple[dict[int, int], set[int]]:
    """The weights version each execution was dispatched at (by sequence number), and the
    sequence numbers whose ``Finished`` was journaled: what a head taking a run over reads first."""
    version_of: dict[int, int] = {}
    finished: set[int] = set()
    for event in events:
        if isinstance(event, Dispatched):
            start = len(version_of)
            version_of.update({seq: event.version for seq in range(start, start + event.count)})
        elif isinstance(event, Finished):
            finished.add(event.seq)
    return version_of, finished
