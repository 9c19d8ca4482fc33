"""The capture store: an append-only, crash-safe binary file of recorded calls whose size grows
with the *unique* tokens of each execution, not with the sum of prompt lengths.

Each call is stored as an edit of the earlier call of its execution that shares its longest
prefix (see :mod:`gyrectl.capture.edit`): a 300-call session whose prompts extend each other
stores its prefix once. One record per call::

    header   "GYC1" | payload length u32 | CRC-32 of payload u32        (little-endian)
    payload  meta length u32 | parent i32 | offset u32 | suffix length u32 | prompt length u32
             | logprob count u32 | meta (UTF-8 JSON: the CallRecord without tokens, defaults
             left out) | suffix tokens (int32) | completion logprobs (float32)

A record is written with one ``write`` (and ``fsync``'d): a crash can only tear the last one.
The reader keeps every record before it; a record that fails its checksum *before* the end is
corruption, not a crash, and raises. The writer cuts a torn tail off before appending.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from gyrectl.capture.edit import Edit, EditChain
from gyrectl.capture.prefix import PrefixIndex
from gyrectl.capture.record import CallRecord
from gyrectl.capture.stored import StoredCall, metadata_only
from gyrectl.errors import RuntimeFailure

MAGIC = b"GYC1"
HEADER = struct.Struct("<4sII")
FIXED = struct.Struct("<IiIIII")
_DEFAULTS = metadata_only(CallRecord(execution="", prompt_token_ids=(), completion_token_ids=())).to_json()


def encode(call: StoredCall) -> bytes:
    meta = {k: v for k, v in call.meta.to_json().items() if v != _DEFAULTS[k] or k == "execution"}
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
    logprobs = b"" if call.logprobs is None else call.logprobs.astype("<f4").tobytes()
    payload = b"".join([
        FIXED.pack(len(meta_bytes), call.edit.parent, call.edit.offset, len(call.edit.suffix), call.prompt_len,
                   0 if call.logprobs is None else len(call.logprobs) + 1),
        meta_bytes, call.edit.suffix.astype("<i4").tobytes(), logprobs])
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def decode(payload: bytes) -> StoredCall:
    meta_len, parent, offset, suffix_len, prompt_len, logprob_field = FIXED.unpack_from(payload)
    at = FIXED.size
    meta = json.loads(payload[at:at + meta_len])
    at += meta_len
    suffix = np.frombuffer(payload, dtype="<i4", count=suffix_len, offset=at).astype(np.int32)
    at += 4 * suffix_len
    # logprob_field is count + 1 so that "no logprobs recorded" (0) differs from "zero of them".
    logprobs = None if logprob_field == 0 else \
        np.frombuffer(payload, dtype="<f4", count=logprob_field - 1, offset=at).astype(np.float32)
    record = CallRecord.from_json({**meta, "prompt_token_ids": [], "completion_token_ids": []})
    return StoredCall(edit=Edit(parent, offset, suffix), prompt_len=prompt_len, logprobs=logprobs, meta=record)


def scan(path: Path) -> tuple[list[StoredCall], int]:
    """Every intact record of ``path`` and the byte length they span (a torn tail excluded)."""
    data = Path(path).read_bytes() if Path(path).exists() else b""
    calls, at = [], 0
    while at < len(data):
        if len(data) - at < HEADER.size:
            break  # torn header
        magic, length, crc = HEADER.unpack_from(data, at)
        end = at + HEADER.size + length
        payload = data[at + HEADER.size:end]
        if magic != MAGIC or end > len(data) or zlib.crc32(payload) != crc:
            if magic == MAGIC and end >= len(data):
                break  # the last record was cut short by a crash
            raise RuntimeFailure(f"{path}: corrupt record at byte {at} (bad magic or checksum)")
        calls.append(decode(payload))
        at = end
    return calls, at


def read_store(path: Path) -> dict[str, list[StoredCall]]:
    """The calls of one store file, grouped by execution in arrival order."""
    return _group(scan(path)[0])


class CaptureWriter:
    """Appends calls to one store file. Keeps, per execution, the prefix index that finds each
    new call's parent: memory grows with the unique tokens of the file's executions, so a
    long-running writer rotates files (one per step, say); the reader re-indexes an execution
    that spans files."""

    def __init__(self, path: Path, *, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        existing, intact = scan(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.ftruncate(self._fd, intact)  # drop a torn tail so the next record starts clean
        self._indexes: dict[str, PrefixIndex] = {}
        for execution, calls in _group(existing).items():
            chain = EditChain()
            for call in calls:
                chain.append(call.edit)
            index = self._indexes.setdefault(execution, PrefixIndex())
            for i in range(len(calls)):
                index.add(chain.tokens(i))

    def append(self, record: CallRecord) -> StoredCall:
        return self.append_tokens(
            metadata_only(record), np.array(record.prompt_token_ids + record.completion_token_ids, dtype=np.int32),
            prompt_len=len(record.prompt_token_ids),
            logprobs=None if record.logprobs is None else np.array(record.logprobs, np.float32))

    def append_tokens(self, meta: CallRecord, tokens: np.ndarray, *, prompt_len: int,
                      logprobs: np.ndarray | None) -> StoredCall:
        """:meth:`append` for a call whose tokens are already an array (prompt + completion)."""
        edit = self._indexes.setdefault(meta.execution, PrefixIndex()).add(tokens)
        call = StoredCall(edit=edit, prompt_len=prompt_len, logprobs=logprobs, meta=meta)
        os.write(self._fd, encode(call))
        if self._fsync:
            os.fsync(self._fd)
        return call

    def record(self, call: CallRecord) -> None:
        """The gateway's sink protocol (:class:`gyrectl.gateway.sink.CallSink`)."""
        self.append(call)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _group(calls: list[StoredCall]) -> dict[str, list[StoredCall]]:
    out: dict[str, list[StoredCall]] = {}
    for call in calls:
        out.setdefault(call.meta.execution, []).append(call)
    return out

