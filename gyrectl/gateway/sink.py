"""Where the gateway puts each finished call: anything with ``record(CallRecord)``.

The capture store implements the same protocol; :class:`JsonlCallSink` is the simple durable
default (JSON lines, fsync'd once per batch of calls, see ``gyrectl.store.jsonl``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from gyrectl.capture.record import CallRecord
from gyrectl.store.jsonl import JsonlAppender


class CallSink(Protocol):
    def record_many(self, calls: Sequence[CallRecord]) -> None:
        """Keeps ``calls`` (one record per choice of every finished or cut-off call), durably
        before it returns; called from one thread at a time (``gyrectl.gateway.commit``)."""


class JsonlCallSink:
    def __init__(self, path: Path, *, fsync: bool = True):
        self._appender = JsonlAppender(path, fsync=fsync)

    def record_many(self, calls: Sequence[CallRecord]) -> None:
        self._appender.append_many([call.to_json() for call in calls])

    def close(self) -> None:
        self._appender.close()
