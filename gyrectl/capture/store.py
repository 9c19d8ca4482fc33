"""The capture store: an append-only, crash-safe binary file of recorded calls whose size grows
with the *unique* tokens of each execution, not with the sum of prompt lengths.

Each call is stored as an edit of the earlier call of its execution that shares its longest
prefix (see :mod:`gyrectl.capture.edit`): a 300-call session whose prompts extend each other
stores its prefix once. One record per call::

    header   "GYC2" | payload length u32 | CRC-32 of "GYC2" + payload u32    (little-endian)
    payload  meta length u32 | parent i32 | offset u32 | suffix length u32 | prompt length u32
             | logprob count u32 | call index u32 | meta (UTF-8 JSON: the CallRecord without
             tokens, defaults left out) | suffix tokens (int32) | completion logprobs (float32)

The call index is the call's index within its execution in this file (what ``parent`` counts).
Records of files written before it existed (``"GYC1"``: no call index, CRC of the payload alone)
are still read, their calls numbered by arrival; a writer appends ``"GYC2"`` records after them.
The version is inside the checksum, so a damaged magic cannot make a record decode the wrong way.

Records are written with one ``write`` per batch (and ``fsync``'d): a crash can only tear the last one.
Damage costs only the record it hits: the reader resynchronises on the next header whose
checksum holds, and a tail with no valid record after it is torn. Every skip is reported. Since
a call is an edit of an earlier one, an intact call whose ancestor was lost cannot be rebuilt:
it is counted as *unrecoverable* (the call indexes tell which execution lost what), never read
back as wrong tokens. The writer cuts a torn tail off before appending, and nothing else.

Beside it the writer keeps an index by execution (:mod:`gyrectl.capture.index`), so
``read_store(path, executions=...)`` reads only those executions' records.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gyrectl.capture.edit import Edit, EditChain
from gyrectl.capture.index import entry, index_path, lookup, rewrite_index
from gyrectl.capture.prefix import PrefixIndex
from gyrectl.capture.record import CallRecord
from gyrectl.capture.stored import StoredCall, metadata_only
from gyrectl.capture.survivors import Survivors, surviving_calls
from gyrectl.store.damage import TORN_TAIL, Skipped, log_skipped

log = logging.getLogger(__name__)

HEADER = struct.Struct("<4sII")
MAGIC = b"GYC2"
"""Records as written now."""
MAGIC_V1 = b"GYC1"
"""Records written before the call index; read, never written."""
_FIXED = {MAGIC: struct.Struct("<IiIIIII"), MAGIC_V1: struct.Struct("<IiIIII")}
_MAGIC_STEM = b"GYC"
_DEFAULTS = metadata_only(CallRecord(execution="", prompt_token_ids=(), completion_token_ids=())).to_json()


def encode(call: StoredCall, *, call_index: int) -> bytes:
    meta = {k: v for k, v in call.meta.to_json().items() if v != _DEFAULTS[k] or k == "execution"}
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
    logprobs = b"" if call.logprobs is None else call.logprobs.astype("<f4").tobytes()
    payload = b"".join([
        _FIXED[MAGIC].pack(len(meta_bytes), call.edit.parent, call.edit.offset, len(call.edit.suffix),
                           call.prompt_len, 0 if call.logprobs is None else len(call.logprobs) + 1, call_index),
        meta_bytes, call.edit.suffix.astype("<i4").tobytes(), logprobs])
    return HEADER.pack(MAGIC, len(payload), _checksum(MAGIC, payload)) + payload


def decode(payload: bytes, *, magic: bytes = MAGIC) -> tuple[StoredCall, int | None]:
    """The call and its call index (None for a ``"GYC1"`` record, which has none)."""
    fixed = _FIXED[magic]
    meta_len, parent, offset, suffix_len, prompt_len, logprob_field, *call_index = fixed.unpack_from(payload)
    at = fixed.size
    meta = json.loads(payload[at:at + meta_len])
    at += meta_len
    suffix = np.frombuffer(payload, dtype="<i4", count=suffix_len, offset=at).astype(np.int32)
    at += 4 * suffix_len
    # logprob_field is count + 1 so that "no logprobs recorded" (0) differs from "zero of them".
    logprobs = None if logprob_field == 0 else \
        np.frombuffer(payload, dtype="<f4", count=logprob_field - 1, offset=at).astype(np.float32)
    record = CallRecord.from_json({**meta, "prompt_token_ids": [], "completion_token_ids": []})
    return StoredCall(edit=Edit(parent, offset, suffix), prompt_len=prompt_len, logprobs=logprobs, meta=record), \
        (call_index[0] if call_index else None)


def _checksum(magic: bytes, payload: bytes) -> int:
    return zlib.crc32(payload) if magic == MAGIC_V1 else zlib.crc32(magic + payload)


@dataclass(frozen=True)
class StoredRecord:
    offset: int
    call_index: int | None
    call: StoredCall
    length: int
    """Bytes of the record, header included."""


@dataclass(frozen=True)
class StoreScan:
    records: list[StoredRecord]
    """Every intact record, in file order."""
    skipped: list[Skipped]
    valid_end: int
    """Byte length up to the end of the last intact record (what a writer keeps)."""


@dataclass(frozen=True)
class StoreContents:
    calls: dict[str, list[StoredCall]]
    """Per execution, in arrival order, every call that can be rebuilt (edits re-indexed over
    them when damage took some)."""
    skipped: list[Skipped]
    unrecoverable: dict[str, int]
    """Per execution, intact calls stored as an edit of a call lost to damage."""


def starts_with_record(path: Path) -> bool:
    """``path`` begins as a store does, with a record's magic (``"GYC2"``, or ``"GYC1"`` of older
    files): how a reader tells a store from a JSONL file of calls whatever its name. An empty
    store, or one whose first record is damaged, does not begin so."""
    with open(path, "rb") as file:
        return file.read(len(MAGIC)) in (MAGIC, MAGIC_V1)


def scan(path: Path, *, start: int = 0) -> StoreScan:
    """Every intact record of ``path`` from byte ``start`` on, and every span skipped between or
    after them."""
    path = Path(path)
    try:
        with open(path, "rb") as file:
            file.seek(start)
            data = file.read()
    except FileNotFoundError:
        data = b""
    records: list[StoredRecord] = []
    skipped: list[Skipped] = []
    at = valid_end = 0
    while at < len(data):
        found = _record_at(data, at)
        if found is not None:
            records.append(StoredRecord(start + at, found[1], found[0], found[2] - at))
            at = valid_end = found[2]
            continue
        following = next(_headers_after(data, at), None)
        if following is None:
            skipped.append(Skipped(str(path), start + at, len(data) - at, _tail_reason(data, at)))
            break
        skipped.append(Skipped(str(path), start + at, following - at, "damaged record (bad header or checksum)"))
        at = following
    return StoreScan(records, skipped, start + valid_end)


def read_store(path: Path, *, executions: Collection[str] | None = None) -> StoreContents:
    """The calls of one store file that can be read back, grouped by execution in arrival order,
    with what damage cost; only ``executions``' when given (through the index, when there is one)."""
    scanned = scan(path) if executions is None else _scan_executions(Path(path), set(executions))
    survivors = surviving_calls((r.call_index, r.call) for r in scanned.records)
    return StoreContents(calls={e: [call for _, call in s.calls] for e, s in survivors.items() if s.calls},
                         skipped=scanned.skipped,
                         unrecoverable={e: s.unrecoverable for e, s in survivors.items() if s.unrecoverable})


def _scan_executions(path: Path, executions: set[str]) -> StoreScan:
    """:func:`scan` kept to ``executions``' records, reading only those the index points to and
    whatever the store holds past the last indexed record."""
    found = lookup(path, executions)
    if found is None:
        whole = scan(path)
        return StoreScan([r for r in whole.records if r.call.meta.execution in executions], whole.skipped,
                         whole.valid_end)
    records: list[StoredRecord] = []
    skipped: list[Skipped] = []
    with open(path, "rb") as file:
        for offset, length in found.spans:
            file.seek(offset)
            record = _record_at(file.read(length), 0)
            if record is None or record[2] != length:  # damage: a gap the survivors account for
                skipped.append(Skipped(str(path), offset, length, "damaged record (bad header or checksum)"))
            elif record[0].meta.execution in executions:  # else another execution of the same digest
                records.append(StoredRecord(offset, record[1], record[0], length))
    tail = scan(path, start=found.indexed_end)
    records += [r for r in tail.records if r.call.meta.execution in executions]
    return StoreScan(records, skipped + tail.skipped, tail.valid_end)


class CaptureWriter:
    """Appends calls to one store file. Keeps, per execution, the prefix index that finds each
    new call's parent: memory grows with the unique tokens of the file's executions, so a
    long-running writer rotates files (one per step, say); the reader re-indexes an execution
    that spans files."""

    def __init__(self, path: Path, *, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        scanned = scan(self.path)
        log_skipped(scanned.skipped, log)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.ftruncate(self._fd, scanned.valid_end)  # a torn tail goes; the next record starts clean
        self._end = scanned.valid_end
        rewrite_index(self.path, [(r.call.meta.execution, r.offset, r.length) for r in scanned.records])
        self._index_fd = os.open(index_path(self.path), os.O_WRONLY | os.O_APPEND, 0o600)
        survivors = surviving_calls((r.call_index, r.call) for r in scanned.records)
        self._indexes = {execution: _prefix_index(s) for execution, s in survivors.items()}

    def append(self, record: CallRecord) -> StoredCall:
        call, data = self._encode_record(record)
        self._write([(record.execution, data)])
        return call

    def append_tokens(self, meta: CallRecord, tokens: np.ndarray, *, prompt_len: int,
                      logprobs: np.ndarray | None) -> StoredCall:
        """:meth:`append` for a call whose tokens are already an array (prompt + completion)."""
        call, record = self._encode(meta, tokens, prompt_len=prompt_len, logprobs=logprobs)
        self._write([(meta.execution, record)])
        return call

    def record_many(self, calls: Sequence[CallRecord]) -> None:
        """The gateway's sink protocol (:class:`gyrectl.gateway.sink.CallSink`): one write and
        one fsync for the batch."""
        self._write([(call.execution, self._encode_record(call)[1]) for call in calls])

    def _encode_record(self, record: CallRecord) -> tuple[StoredCall, bytes]:
        return self._encode(metadata_only(record),
                            np.array(record.prompt_token_ids + record.completion_token_ids, dtype=np.int32),
                            prompt_len=len(record.prompt_token_ids),
                            logprobs=None if record.logprobs is None else np.array(record.logprobs, np.float32))

    def _encode(self, meta: CallRecord, tokens: np.ndarray, *, prompt_len: int,
                logprobs: np.ndarray | None) -> tuple[StoredCall, bytes]:
        index = self._indexes.setdefault(meta.execution, PrefixIndex())
        call = StoredCall(edit=index.add(tokens), prompt_len=prompt_len, logprobs=logprobs, meta=meta)
        return call, encode(call, call_index=len(index.chain.edits) - 1)

    def _write(self, records: Sequence[tuple[str, bytes]]) -> None:
        os.write(self._fd, b"".join(record for _, record in records))
        if self._fsync:
            os.fsync(self._fd)
        entries = []
        for execution, record in records:
            entries.append(entry(execution, self._end, len(record)))
            self._end += len(record)
        os.write(self._index_fd, b"".join(entries))  # after the records: never ahead of them

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            os.close(self._index_fd)
            self._fd = -1

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _record_at(data: bytes, at: int) -> tuple[StoredCall, int | None, int] | None:
    """The intact record starting at ``at`` as ``(call, call_index, end)``, or None."""
    if len(data) - at < HEADER.size:
        return None
    magic, length, crc = HEADER.unpack_from(data, at)
    end = at + HEADER.size + length
    if magic not in _FIXED or end > len(data) or _checksum(magic, data[at + HEADER.size:end]) != crc:
        return None
    try:
        call, call_index = decode(data[at + HEADER.size:end], magic=magic)
    except (ValueError, TypeError, KeyError, struct.error):
        return None  # the checksum holds but the payload does not decode: damage all the same
    return call, call_index, end


def _headers_after(data: bytes, at: int) -> Iterator[int]:
    """Offsets after ``at`` where an intact record starts: where reading resumes after damage."""
    found = data.find(_MAGIC_STEM, at + 1)
    while found >= 0:
        if _record_at(data, found) is not None:
            yield found
        found = data.find(_MAGIC_STEM, found + 1)


def _tail_reason(data: bytes, at: int) -> str:
    if len(data) - at >= HEADER.size:
        magic, length, _ = HEADER.unpack_from(data, at)
        if magic in _FIXED and at + HEADER.size + length == len(data):
            return "damaged last record (bad checksum)"
    return TORN_TAIL


def _prefix_index(survivors: Survivors) -> PrefixIndex:
    """The writer's index of an execution reopened from the file: the survivors' tokens at their
    call indexes, and a place held (never a parent) for each lost call."""
    chain = EditChain()
    for _, call in survivors.calls:
        chain.append(call.edit)
    place = {call_index: i for i, (call_index, _) in enumerate(survivors.calls)}
    index = PrefixIndex()
    for call_index in range(survivors.num_indexes):
        if call_index in place:
            index.add(chain.tokens(place[call_index]))
        else:
            index.hold_place()
    return index
