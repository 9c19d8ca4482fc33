"""Append-only JSON-lines files that survive a crash.

Each record is one line, written with a single ``write`` and ``fsync``'d before ``append``
returns, so a crash can only tear the *last* line. :func:`read_records` keeps every complete
record and skips a torn tail (a last line without its newline or that does not parse); a bad
line in the *middle* is corruption, not a crash, and raises.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gyrectl.errors import RuntimeFailure


class JsonlAppender:
    """Appends records to one JSONL file, durably (one write + fsync per record)."""

    def __init__(self, path: Path, *, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._drop_torn_tail()

    def _drop_torn_tail(self) -> None:
        # A crash mid-write leaves a last line without "\n"; appending after it would glue the
        # next record onto garbage, so cut the file back to the last complete line first.
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
        os.ftruncate(self._fd, data.rfind(b"\n") + 1)

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n"
        os.write(self._fd, line.encode())
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Yields every complete record of ``path``; a torn last line is skipped."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    # After split, a file that ends in "\n" has an empty last element; anything else there is
    # a line the writer never finished.
    complete, tail = lines[:-1], lines[-1]  # a non-empty tail is a torn last record: skipped
    for number, raw in enumerate(complete, start=1):
        if not raw.strip():
            continue
        try:
            yield json.loads(raw)
        except json.JSONDecodeError as exc:
            if number == len(complete) and not tail:
                return  # the last complete-looking line may itself be torn (partial flush)
            raise RuntimeFailure(f"{path}:{number}: corrupt record ({exc.msg})") from exc
