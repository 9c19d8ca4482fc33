"""What a new head takes over from the one before it, as a pure function of the journal's events
and the executions log: the finished executions no completed training step has taken yet, and the
executions that were running when the old head went (their harnesses went with it).

The journal is the truth: an execution counts as finished only once its ``Finished`` event was
journaled. A log record without one (the head died between the two writes) is ignored and the
execution runs again, under a new id (``e000012-r1``) so its calls never mix with the dead run's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gyrectl.coordinator.events import Event
from gyrectl.coordinator.journal import dispatched_and_finished


@dataclass(frozen=True)
class CarriedOver:
    finished: list[dict[str, Any]]
    """Execution records (the executions log's) finished and not taken by a completed step, by seq."""
    running: list[tuple[int, int]]
    """``(seq, weights version it was dispatched at)`` of the executions to run again, by seq."""
    next_seq: int
    """The sequence number of the next execution to dispatch."""


def carry_over(events: Sequence[Event], records: Iterable[dict[str, Any]], *, completed_steps: int) -> CarriedOver:
    version_of, finished = dispatched_and_finished(events)
    last_record: dict[int, dict[str, Any]] = {}
    taken: set[str] = set()
    for record in records:
        if "status" in record:
            if _is_finished_line(record):
                last_record[record["seq"]] = record  # a re-run's record comes after its orphan
        elif isinstance(record.get("step"), int) and isinstance(record.get("execution"), str):
            if record["step"] < completed_steps:
                taken.add(record["execution"])  # claims of an abandoned step do not count
    done = [last_record[seq] for seq in sorted(finished)
            if seq in last_record and last_record[seq]["execution"] not in taken]
    running = [(seq, version) for seq, version in sorted(version_of.items()) if seq not in finished]
    return CarriedOver(finished=done, running=running, next_seq=len(version_of))


def _is_finished_line(record: dict[str, Any]) -> bool:
    """A finished execution's line as ``LiveExecutions`` writes it (damage that still parses as
    JSON may have lost a field; such a line is left out like an unreadable one)."""
    return isinstance(record.get("seq"), int) and isinstance(record.get("execution"), str) \
        and isinstance(record.get("status"), str) and "weight_version" in record
