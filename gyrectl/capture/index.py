"""The capture store's index by execution: ``calls.seg.idx`` beside ``calls.seg``, so a training
step reads only its batch's records instead of the whole run's (whose store grows every step).

    entry (20 bytes, little-endian): execution digest u64 | record offset u64 | record length u32

The digest is the first 8 bytes of the execution id's BLAKE2b: entries are fixed-size, so a
lookup is one vectorised pass over the file (numpy), not a parse. A collision only makes the
reader decode a record it then drops (every record names its execution).

The store stays the truth and the index is derived from it: an entry is written after its record
is written and fsync'd (never fsync'd itself), so a crash can leave the index behind the store
but never ahead of it; a writer that opens the store rewrites the index whole from the records it
scans; a reader checks every record the index points to against the store's checksum, and scans
the store past the last indexed record. A torn entry at the end is ignored.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ENTRY = struct.Struct("<QQI")
_ENTRIES = np.dtype([("digest", "<u8"), ("offset", "<u8"), ("length", "<u4")])
assert _ENTRIES.itemsize == ENTRY.size


def index_path(store: Path) -> Path:
    return store.with_name(store.name + ".idx")


def digest(execution: str) -> int:
    return int.from_bytes(hashlib.blake2b(execution.encode(), digest_size=8).digest(), "little")


def entry(execution: str, offset: int, length: int) -> bytes:
    return ENTRY.pack(digest(execution), offset, length)


def rewrite_index(store: Path, records: Iterable[tuple[str, int, int]]) -> None:
    """The index of ``records`` (``(execution, offset, length)``, file order), replacing any other."""
    path = index_path(store)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as out:
        out.write(b"".join(entry(*record) for record in records))
    os.replace(tmp, path)


@dataclass(frozen=True)
class Lookup:
    spans: list[tuple[int, int]]
    """``(offset, length)`` of the records indexed under the executions' digests, in file order."""
    indexed_end: int
    """Where the last indexed record ends: the store is scanned from here."""


def lookup(store: Path, executions: Collection[str]) -> Lookup | None:
    """Where the records of ``executions`` are, per the index (None: there is no index)."""
    try:
        data = index_path(store).read_bytes()
    except FileNotFoundError:
        return None
    entries = np.frombuffer(data, dtype=_ENTRIES, count=len(data) // ENTRY.size)
    if not len(entries):
        return Lookup([], 0)
    wanted = np.isin(entries["digest"], np.array([digest(e) for e in executions], dtype=np.uint64))
    ends = entries["offset"] + entries["length"]
    picked = entries[wanted]
    return Lookup(spans=[(int(o), int(n)) for o, n in zip(picked["offset"], picked["length"], strict=True)],
                  indexed_end=int(ends.max()))
