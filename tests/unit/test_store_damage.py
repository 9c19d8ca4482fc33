"""Capture store under random damage: a flipped byte or a truncation anywhere costs only the
record it hits (and the calls stored as edits of it, which are counted, never misread), and
reopening the writer never cuts an intact record. Also: files of the format before the call
index are still read and appended to."""

from __future__ import annotations

import functools
import json
import struct
import tempfile
import zlib
from pathlib import Path

from hypothesis import given, strategies as st

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import CaptureWriter, read_store, scan
from gyrectl.capture.stored import StoredCall, full_records, stored_calls

import damage
from agent_shapes import all_patterns
from damage import damage_settings
from test_store import as_stored

SEEDS = 4


@functools.cache
def _base(seed: int) -> tuple[bytes, tuple[CallRecord, ...], tuple[tuple[int, int, str, int, int], ...]]:
    """A store of two interleaved executions: its bytes, the records, and per record its span,
    execution, call index and parent index."""
    a, b = all_patterns("a", seed=seed), all_patterns("b", seed=seed + 100)
    records = [r for pair in zip(a, b, strict=True) for r in pair]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "calls.seg"
        with CaptureWriter(path, fsync=False) as writer:
            for record in records:
                writer.append(record)
        data = path.read_bytes()
        scanned = scan(path).records
    ends = [r.offset for r in scanned[1:]] + [len(data)]
    layout = tuple((r.offset, end, r.call.meta.execution, r.call_index, r.call.edit.parent)
                   for r, end in zip(scanned, ends, strict=True))
    return data, tuple(records), layout


def _expected(records, layout, hit: range) -> tuple[dict[str, list[CallRecord]], int, int]:
    """Per execution the calls that must read back intact, the count of intact calls that build on
    a damaged one, and the end of the last undamaged record."""
    lost: set[tuple[str, int]] = set()
    for start, end, execution, index, _ in layout:
        if start < hit.stop and hit.start < end:
            lost.add((execution, index))
    doomed = set(lost)
    for _, _, execution, index, parent in layout:  # parents come first in file order
        if parent >= 0 and (execution, parent) in doomed:
            doomed.add((execution, index))
    expected: dict[str, list[CallRecord]] = {}
    for record, (_, _, execution, index, _) in zip(records, layout, strict=True):
        if (execution, index) not in doomed:
            expected.setdefault(execution, []).append(as_stored(record))
    last_intact_end = max((end for start, end, e, i, _ in layout if (e, i) not in lost), default=0)
    return expected, len(doomed) - len(lost), last_intact_end


def _check(seed: int, damage) -> None:
    data, records, layout = _base(seed)
    damaged, hit = damage(data)
    expected, unrecoverable, last_intact_end = _expected(records, layout, hit)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "calls.seg"
        path.write_bytes(damaged)
        contents = read_store(path)
        assert {e: full_records(calls) for e, calls in contents.calls.items()} == expected
        assert sum(contents.unrecoverable.values()) == unrecoverable
        assert contents.skipped or damaged == data[:len(damaged)]  # a changed byte is always reported
        # Reopen, append to a surviving execution and a new one: nothing intact is cut, and the
        # new calls read back after the survivors.
        new = [CallRecord(execution="a", prompt_token_ids=(5, 6, 7), completion_token_ids=(8,)),
               CallRecord(execution="c", prompt_token_ids=(9,), completion_token_ids=(10, 11))]
        with CaptureWriter(path, fsync=False) as writer:
            for record in new:
                writer.append(record)
        assert path.stat().st_size >= last_intact_end
        after = read_store(path)
        assert full_records(after.calls["a"]) == expected.get("a", []) + [new[0]]
        assert full_records(after.calls["c"]) == [new[1]]
        assert {e: full_records(c) for e, c in after.calls.items() if e not in "ac"} == \
            {e: c for e, c in expected.items() if e not in "ac"}


@damage_settings
@given(seed=st.integers(0, SEEDS - 1), where=damage.where, byte=damage.byte)
def test_a_random_byte_costs_at_most_its_own_record(seed, where, byte) -> None:
    _check(seed, lambda data: damage.flipped(data, where, byte))


@damage_settings
@given(seed=st.integers(0, SEEDS - 1), where=damage.where)
def test_a_truncation_costs_at_most_the_record_it_cuts(seed, where) -> None:
    _check(seed, lambda data: damage.truncated(data, where))


def _v1_record(call: StoredCall) -> bytes:
    """A record as gyrectl wrote it before the call index (magic GYC1, CRC of the payload)."""
    meta = json.dumps({"execution": call.meta.execution}, separators=(",", ":")).encode()
    payload = struct.pack("<IiIIII", len(meta), call.edit.parent, call.edit.offset, len(call.edit.suffix),
                          call.prompt_len, 0) + meta + call.edit.suffix.astype("<i4").tobytes()
    return struct.pack("<4sII", b"GYC1", len(payload), zlib.crc32(payload)) + payload


def test_a_file_of_the_format_before_the_call_index_is_read_and_appended_to(tmp_path):
    old = [CallRecord(execution="e", prompt_token_ids=(1, 2, 3), completion_token_ids=(4,)),
           CallRecord(execution="e", prompt_token_ids=(1, 2, 3, 4, 5), completion_token_ids=(6,))]
    path = tmp_path / "calls.seg"
    path.write_bytes(b"".join(_v1_record(call) for call in stored_calls(old)["e"]))
    assert full_records(read_store(path).calls["e"]) == old
    new = CallRecord(execution="e", prompt_token_ids=(1, 2, 3, 4, 5, 6, 7), completion_token_ids=(8,))
    with CaptureWriter(path, fsync=False) as writer:
        stored = writer.append(new)
    assert stored.edit.parent == 1 and len(stored.edit.suffix) == 2  # it still deduplicates against them
    assert full_records(read_store(path).calls["e"]) == old + [new]
