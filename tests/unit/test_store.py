"""Capture store: crash safety (torn last record at every byte offset) and growth with unique
tokens."""

from __future__ import annotations

import dataclasses

import numpy as np

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import CaptureWriter, read_store, scan
from gyrectl.capture.stored import full_records, stored_calls
from gyrectl.store.damage import TORN_TAIL

from agent_shapes import all_patterns


def write(path, records, **kw):
    with CaptureWriter(path, fsync=False, **kw) as writer:
        for r in records:
            writer.append(r)


def as_stored(record: CallRecord) -> CallRecord:
    """``record`` as read back: its logprobs are stored as float32."""
    return dataclasses.replace(record, logprobs=None if record.logprobs is None
                               else tuple(np.float32(record.logprobs).tolist()))


def _not_extending(records: list[CallRecord], *, lost: int) -> list[CallRecord]:
    """The calls of one execution whose stored form does not build on call ``lost``."""
    edits = [call.edit for call in next(iter(stored_calls(records).values()))]
    doomed = {lost}
    for i, edit in enumerate(edits):
        if edit.parent in doomed:
            doomed.add(i)
    return [r for i, r in enumerate(records) if i not in doomed]


def test_round_trip_keeps_every_field(tmp_path):
    records = all_patterns("x", seed=1) + all_patterns("y", seed=2)
    write(tmp_path / "calls.seg", records)
    back = read_store(tmp_path / "calls.seg")
    assert back.skipped == [] and back.unrecoverable == {}
    assert full_records(back.calls["x"]) + full_records(back.calls["y"]) == [as_stored(r) for r in records]


def test_torn_last_record_is_skipped_at_every_byte_offset(tmp_path):
    path = tmp_path / "calls.seg"
    records = all_patterns(seed=3)
    write(path, records[:-1])
    intact = path.stat().st_size
    write(path, records[-1:])
    data = path.read_bytes()
    for cut in range(intact, len(data)):
        path.write_bytes(data[:cut])
        assert len(read_store(path).calls["e0"]) == len(records) - 1, cut
    # reopening after a crash drops the torn tail and appends cleanly after the intact records
    path.write_bytes(data[:intact + 5])
    write(path, records[-1:])
    assert full_records(read_store(path).calls["e0"])[-1].completion_token_ids == records[-1].completion_token_ids
    assert path.stat().st_size == len(data)


def test_corruption_in_the_middle_costs_only_the_damaged_record(tmp_path):
    path = tmp_path / "calls.seg"
    records = all_patterns("a", seed=4) + all_patterns("b", seed=5)
    write(path, records)
    offsets = [r.offset for r in scan(path).records]
    data = bytearray(path.read_bytes())
    data[offsets[14] + 40] ^= 0xFF  # inside the payload of b's third call
    path.write_bytes(bytes(data))
    contents = read_store(path)
    assert [(s.offset, s.length) for s in contents.skipped] == [(offsets[14], offsets[15] - offsets[14])]
    assert full_records(contents.calls["a"]) == [as_stored(r) for r in records[:12]]
    kept = full_records(contents.calls["b"])
    assert kept == [as_stored(r) for r in records[12:] if r in _not_extending(records[12:], lost=2)]
    assert len(kept) + contents.unrecoverable.get("b", 0) == 11


def test_a_flipped_length_field_is_not_read_as_a_torn_tail(tmp_path):
    """The issue's case: one flipped byte in the length field of call 3 of 6 made the reader stop
    there (2 of 6 calls) and the reopened writer truncate the 4 intact records after it."""
    path = tmp_path / "calls.seg"
    records = [CallRecord(execution=f"e{i}", prompt_token_ids=(1, 2, i), completion_token_ids=(7,)) for i in range(6)]
    write(path, records)
    size, offsets = path.stat().st_size, [r.offset for r in scan(path).records]
    data = bytearray(path.read_bytes())
    data[offsets[2] + 5] ^= 0x40  # the length's second byte: the record now claims to run past the end
    path.write_bytes(bytes(data))
    assert sorted(read_store(path).calls) == ["e0", "e1", "e3", "e4", "e5"]
    write(path, [CallRecord(execution="e6", prompt_token_ids=(1,), completion_token_ids=(2,))])
    assert path.stat().st_size > size  # nothing cut
    assert sorted(read_store(path).calls) == ["e0", "e1", "e3", "e4", "e5", "e6"]


def test_garbage_after_the_last_record_is_a_torn_tail_cut_on_reopen(tmp_path):
    path = tmp_path / "calls.seg"
    records = all_patterns(seed=6)
    write(path, records[:-1])
    size = path.stat().st_size
    path.write_bytes(path.read_bytes() + bytes(range(20)))
    assert [s.reason for s in read_store(path).skipped] == [TORN_TAIL]
    write(path, records[-1:])
    assert full_records(read_store(path).calls["e0"]) == [as_stored(r) for r in records]
    assert read_store(path).skipped == [] and path.stat().st_size > size


def test_storage_grows_with_unique_tokens_not_prompt_lengths(tmp_path):
    """300 calls, each prompt extending the last by 100 tokens: 4.5M naive, 30K unique tokens."""
    rng = np.random.default_rng(0)
    history: list[int] = rng.integers(0, 4096, 100).tolist()
    records = []
    for i in range(300):
        completion = rng.integers(0, 4096, 20).tolist()
        records.append(CallRecord(execution="long", prompt_token_ids=tuple(history),
                                  completion_token_ids=tuple(completion), weight_version=i // 50,
                                  logprobs=tuple((-rng.random(20)).tolist())))
        history += completion + rng.integers(0, 4096, 80).tolist()
    path = tmp_path / "calls.seg"
    write(path, records)
    unique = 100 + 300 * 100 - 80  # the first prompt, then 100 new tokens per call
    naive = sum(len(r.prompt_token_ids) + len(r.completion_token_ids) for r in records)
    assert naive > 100 * unique
    token_bytes = 4 * unique
    logprob_bytes = 4 * 300 * 20
    assert path.stat().st_size <= 1.2 * token_bytes + logprob_bytes
    assert full_records(read_store(path).calls["long"])[-1] == as_stored(records[-1])


def test_writer_reopened_keeps_deduplicating(tmp_path):
    path = tmp_path / "calls.seg"
    records = all_patterns(seed=5)
    write(path, records[:6])
    size = path.stat().st_size
    write(path, records[6:7])
    one_call = path.stat().st_size - size
    new_tokens = read_store(path).calls["e0"][6].edit.suffix
    assert one_call < 4 * len(new_tokens) + 400  # the prefix was not stored again


def test_json_form_is_every_field_in_plain_containers_and_owns_them():
    record = CallRecord(execution="e", prompt_token_ids=(1, 2), completion_token_ids=(3,), logprobs=(-0.5,),
                        tool_calls=({"id": "t", "function": {"name": "f", "arguments": "{}"}},),
                        segments=({"server": "a", "weight_version": 1, "start": 0},), extra={"usage": {"n": 1}})
    out = record.to_json()
    assert out == {**{f.name: getattr(record, f.name) for f in dataclasses.fields(CallRecord)},
                   "prompt_token_ids": [1, 2], "completion_token_ids": [3], "logprobs": [-0.5],
                   "tool_calls": [dict(record.tool_calls[0])], "segments": [dict(record.segments[0])]}
    out["tool_calls"][0]["function"]["name"] = "changed"
    out["segments"][0]["start"] = 9
    out["extra"]["usage"]["n"] = 2
    assert record.tool_calls[0]["function"]["name"] == "f" and record.segments[0]["start"] == 0
    assert record.extra == {"usage": {"n": 1}} and CallRecord.from_json(record.to_json()) == record
