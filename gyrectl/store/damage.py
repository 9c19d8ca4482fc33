"""What a reader of a durable file passed over: a damaged span, where it was and why.

Readers of the run's files never refuse a whole file for one bad record, and never skip one in
silence: every span they could not read comes back as a :class:`Skipped`, so ``gyrectl replay``
and ``gyrectl status`` can say what was skipped, where, and how many records survive.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

TORN_TAIL = "incomplete last record (being written, or cut off by a crash)"
"""The reason given for a tail with no valid record after it: a crash mid-write, or a reader
that looked while the writer was writing. Every other reason is damage."""


@dataclass(frozen=True)
class Skipped:
    path: str
    offset: int
    """Byte offset of the span's first byte."""
    length: int
    """Bytes in the span."""
    reason: str
    line: int | None = None
    """Line number (1-based) in a line-oriented file."""

    @property
    def torn_tail(self) -> bool:
        return self.reason == TORN_TAIL

    def describe(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else f"{self.path}: byte {self.offset}"
        return f"{where}: {self.reason} ({self.length} byte(s) skipped)"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, "offset": self.offset, "bytes": self.length, "line": self.line,
                "reason": self.reason}


def log_skipped(skipped: Iterable[Skipped], log: logging.Logger) -> None:
    """One warning per damaged span; a torn tail is what a crash (or a live writer) leaves, not
    news for a log."""
    for span in skipped:
        if not span.torn_tail:
            log.warning(span.describe())
