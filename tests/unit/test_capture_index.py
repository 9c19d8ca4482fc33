"""The capture store's index by execution: reading a few executions gives what a whole read gives
for them, touches no other record (every other byte of the store is destroyed here and nothing is
reported), and survives an index left behind by a crash, a torn entry, or no index at all."""

from __future__ import annotations

import dataclasses
import itertools

from gyrectl.capture.index import ENTRY, index_path, lookup
from gyrectl.capture.store import CaptureWriter, read_store, scan
from gyrectl.capture.stored import full_records

from agent_shapes import all_patterns

EXECUTIONS = ("a", "b", "c", "d")


def _write(path, executions=EXECUTIONS, seed=0):
    sessions = [all_patterns(e, seed=seed + i) for i, e in enumerate(executions)]
    # interleaved, as concurrent sessions' calls arrive
    records = [r for turn in itertools.zip_longest(*sessions) for r in turn if r is not None]
    with CaptureWriter(path, fsync=False) as writer:
        for record in records:
            writer.append(record)
    return records


def _destroy_all_but(path, keep: set[str]) -> None:
    """Every byte of every record of another execution becomes 0xFF."""
    data = bytearray(path.read_bytes())
    for record in scan(path).records:
        if record.call.meta.execution not in keep:
            data[record.offset:record.offset + record.length] = b"\xff" * record.length
    path.write_bytes(bytes(data))


def test_reading_some_executions_equals_the_whole_read_for_them(tmp_path):
    path = tmp_path / "calls.seg"
    _write(path)
    whole = read_store(path)
    some = read_store(path, executions={"b", "d", "never-recorded"})
    assert set(some.calls) == {"b", "d"} and some.skipped == []
    assert {e: full_records(c) for e, c in some.calls.items()} == {e: full_records(whole.calls[e]) for e in ("b", "d")}
    assert len(lookup(path, {"b"}).spans) == len(whole.calls["b"])


def test_only_the_asked_executions_records_are_read(tmp_path):
    path = tmp_path / "calls.seg"
    _write(path)
    before = full_records(read_store(path).calls["c"])
    _destroy_all_but(path, {"c"})
    read = read_store(path, executions={"c"})
    assert read.skipped == [] and full_records(read.calls["c"]) == before  # nothing else was looked at
    assert read_store(path).skipped  # a whole read meets the destroyed records


def test_records_past_the_index_and_a_torn_entry_are_still_found(tmp_path):
    """A crash between a record and its index entry leaves the index behind (never ahead)."""
    path = tmp_path / "calls.seg"
    _write(path)
    whole = read_store(path)
    index = index_path(path)
    entries = index.read_bytes()
    index.write_bytes(entries[:-5 * ENTRY.size] + entries[-5 * ENTRY.size:-4 * ENTRY.size][:7])
    read = read_store(path, executions=set(EXECUTIONS))
    assert {e: full_records(c) for e, c in read.calls.items()} == {e: full_records(c) for e, c in whole.calls.items()}


def test_a_store_without_index_is_read_whole_and_a_writer_rebuilds_it(tmp_path):
    path = tmp_path / "calls.seg"
    records = _write(path)
    index_path(path).unlink()
    assert full_records(read_store(path, executions={"a"}).calls["a"]) == full_records(read_store(path).calls["a"])
    more = [dataclasses.replace(r, execution="e") for r in all_patterns("e", seed=9)]
    with CaptureWriter(path, fsync=False) as writer:  # reopened: indexes what was there, then what comes
        writer.append(more[0])
    assert index_path(path).stat().st_size == (len(records) + 1) * ENTRY.size
    _destroy_all_but(path, {"a"})
    assert read_store(path, executions={"a"}).skipped == []


def test_damage_in_an_asked_execution_costs_what_a_whole_read_says(tmp_path):
    path = tmp_path / "calls.seg"
    _write(path)
    offsets = [r.offset for r in scan(path).records if r.call.meta.execution == "b"]
    data = bytearray(path.read_bytes())
    data[offsets[2] + 40] ^= 0xFF
    path.write_bytes(bytes(data))
    whole, some = read_store(path), read_store(path, executions={"b"})
    assert [s.offset for s in some.skipped] == [offsets[2]] == [s.offset for s in whole.skipped]
    assert full_records(some.calls["b"]) == full_records(whole.calls["b"])
    assert some.unrecoverable.get("b") == whole.unrecoverable.get("b")

