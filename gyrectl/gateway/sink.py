"""Where the gateway puts each finished call: anything with ``record(CallRecord)``.

The capture store implements the same protocol; :class:`JsonlCallSink` is the simple durable
default (one fsync'd JSON line per call, see ``gyrectl.store.jsonl``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from gyrectl.capture.record import CallRecord
from gyrectl.store.jsonl import JsonlAppender


class CallSink(Protocol):
    def record(self, call: CallRecord) -> None:
        """Keeps ``call``; called once per choice of every finished (or cut-off) call."""


class JsonlCallSink:
    def __init__(self, path: Path, *, fsync: bool = True):
        self._appender = JsonlAppender(path, fsync=fsync)

    def record(self, call: CallRecord) -> None:
        self._appender.append(call.to_json())

    def close(self) -> None:
        self._appender.close()
