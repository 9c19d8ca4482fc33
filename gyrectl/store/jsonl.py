"""Append-only JSON-lines files that survive a crash and lose nothing to a damaged byte.

Each record is one line, written with a single ``write`` and ``fsync``'d before ``append``
returns, so a crash can only tear the *last* line. Damage anywhere else costs only the record it
hits:

* a line that does not parse, or is not a JSON object, is skipped and reported;
* a record whose line end was damaged into another byte is glued to the next one: both are read
  (the JSON decoder finds where the first object ends), and the stray byte is reported;
* an unterminated last line is a torn tail when it holds no whole record, and a record missing
  only its line end otherwise.

:func:`scan_jsonl` returns the records and a :class:`~gyrectl.store.damage.Skipped` per span it
passed over, for readers that report damage (``gyrectl status``, ``gyrectl replay``);
:func:`read_records` yields the records and logs the skips. The appender repairs a torn tail
before it appends, so the next record never lands on garbage, and never cuts a whole record.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gyrectl.store.damage import TORN_TAIL, Skipped, log_skipped

log = logging.getLogger(__name__)
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class JsonlContents:
    path: str
    records: list[dict[str, Any]]
    skipped: list[Skipped]
    spans: list[tuple[int, int, int]]
    """``(line number, start, end)`` of each record, for :meth:`refused`."""

    def refused(self, i: int, reason: str) -> Skipped:
        """A skip for record ``i``, whose JSON parsed but whose content the reader cannot use."""
        line, start, end = self.spans[i]
        return Skipped(self.path, start, end - start, reason, line=line)


@dataclass(frozen=True)
class ParsedLine:
    """What one line of the file holds: its records with their byte ends, and its bad spans."""

    records: list[tuple[dict[str, Any], int, int]]
    """Each record with its start and end byte offsets."""
    bad: list[tuple[int, int, str]]
    """``(start, end, reason)`` of each span that holds no record."""


def scan_jsonl(path: Path) -> JsonlContents:
    """Every record of ``path`` that can be read, and what was skipped (a missing file is empty)."""
    path = Path(path)
    contents = JsonlContents(str(path), [], [], [])
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return contents
    start, number = 0, 1
    while start < len(data):
        newline = data.find(b"\n", start)
        end = len(data) if newline < 0 else newline
        if newline >= 0 and data[start:start + 1] == b"{" and data[end - 1:end] == b"}":
            try:  # the intact line, as nearly every line is: one decode, no damage bookkeeping
                record = _DECODER.decode(data[start:end].decode())
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                record = None
            if isinstance(record, dict):
                contents.records.append(record)
                contents.spans.append((number, start, end))
                start, number = end + 1, number + 1
                continue
        line = parse_line(data, start, end, terminated=newline >= 0)
        contents.records.extend(record for record, _, _ in line.records)
        contents.spans.extend((number, lo, hi) for _, lo, hi in line.records)
        contents.skipped.extend(Skipped(str(path), lo, hi - lo, reason, line=number) for lo, hi, reason in line.bad)
        start, number = end + 1, number + 1
    return contents


def last_record(path: Path, marker: bytes, where: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The last record of ``path`` for which ``where`` holds, reading back from the end a block at
    a time and parsing only lines that hold ``marker`` (bytes every such record's line holds), so
    a record near the end of a long file costs a block, not the file. Damaged lines are passed over
    as :func:`scan_jsonl` passes them."""
    try:
        file = open(path, "rb")
    except FileNotFoundError:
        return None
    with file:
        end = file.seek(0, os.SEEK_END)
        carry = b""  # the start of the line that straddles the block boundary
        while end > 0:
            start = max(0, end - _BACK_BLOCK)
            file.seek(start)
            block = file.read(end - start) + carry
            newline = block.find(b"\n")
            if start > 0 and newline < 0:  # one line longer than the block: read on back
                carry, end = block, start
                continue
            first = newline + 1 if start > 0 else 0  # a partial first line waits for the block before
            carry, lines = block[:first], block[first:]
            for line in reversed(lines.split(b"\n")):
                if marker in line:
                    parsed = parse_line(line, 0, len(line), terminated=True)
                    for record, _, _ in reversed(parsed.records):
                        if where(record):
                            return record
            end = start
        return None


_BACK_BLOCK = 1 << 16


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Yields every record of ``path`` that can be read; what cannot is logged and skipped."""
    contents = scan_jsonl(path)
    log_skipped(contents.skipped, log)
    yield from contents.records


class JsonlTail:
    """The records appended to a file another process writes, as they come: each :meth:`new`
    returns the whole lines added since the last call (a line still being written waits for its
    newline); a damaged line is logged and skipped like :func:`read_records` does."""

    def __init__(self, path: Path):
        self._path, self._offset = Path(path), 0

    def new(self) -> list[dict[str, Any]]:
        try:
            with open(self._path, "rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return []
        complete = data.rfind(b"\n") + 1
        records, skipped, start = [], [], 0
        while start < complete:
            end = data.find(b"\n", start)
            line = parse_line(data, start, end, terminated=True)
            records += [record for record, _, _ in line.records]
            skipped += [Skipped(str(self._path), self._offset + lo, hi - lo, reason) for lo, hi, reason in line.bad]
            start = end + 1
        log_skipped(skipped, log)
        self._offset += complete
        return records


def parse_line(data: bytes, start: int, end: int, *, terminated: bool) -> ParsedLine:
    """The records in ``data[start:end]`` (one line, without its newline), with absolute offsets."""
    raw = data[start:end]
    text = raw.decode("utf-8", "surrogateescape")  # a damaged byte must not hide the rest of the line
    to_byte = (lambda i: start + i) if len(text) == len(raw) else \
        (lambda i: start + len(text[:i].encode("utf-8", "surrogateescape")))
    line = ParsedLine([], [])
    at = 0
    while True:
        while at < len(text) and text[at] in " \t\r":
            at += 1
        if at == len(text):
            return line
        try:
            value, stop = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):
            line.bad.append((to_byte(at), end, "not valid JSON" if terminated else TORN_TAIL))
            return line
        if not isinstance(value, dict):
            line.bad.append((to_byte(at), end, "not a JSON object"))
            return line
        line.records.append((value, to_byte(at), to_byte(stop)))
        if not text[stop:].strip():
            return line
        # Another byte where this record's line end should be: the next record follows it.
        line.bad.append((to_byte(stop), to_byte(stop + 1), "damaged line end between two records"))
        at = stop + 1


class JsonlAppender:
    """Appends records to one JSONL file, durably (one write + fsync per record, or per batch)."""

    def __init__(self, path: Path, *, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        self._repair_tail()

    def _repair_tail(self) -> None:
        # Appending after an unterminated last line would glue the next record onto it. Keep the
        # whole records that line holds (end it with its newline) and cut only what follows them.
        size = os.fstat(self._fd).st_size
        if size == 0 or os.pread(self._fd, 1, size - 1) == b"\n":
            return
        data = os.pread(self._fd, size, 0)
        start = data.rfind(b"\n") + 1
        line = parse_line(data, start, size, terminated=False)
        keep = line.records[-1][2] if line.records else start
        if keep < size:
            log.warning("%s: cut %d byte(s) of an incomplete last record at byte %d", self.path, size - keep, keep)
            os.ftruncate(self._fd, keep)
        if keep > start:
            os.write(self._fd, b"\n")

    def append(self, record: dict[str, Any]) -> None:
        self.append_many([record])

    def append_many(self, records: Sequence[dict[str, Any]]) -> None:
        """One write and one fsync for all of ``records`` (a crash still tears only the last line)."""
        lines = "".join(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n" for record in records)
        os.write(self._fd, lines.encode())
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
