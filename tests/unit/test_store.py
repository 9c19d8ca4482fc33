"""Capture store: crash safety (torn last record at every byte offset) and growth with unique
tokens."""

from __future__ import annotations

import numpy as np
import pytest

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import CaptureWriter, read_store
from gyrectl.capture.stored import full_records
from gyrectl.errors import RuntimeFailure
from agent_shapes import all_patterns


def write(path, records, **kw):
    with CaptureWriter(path, fsync=False, **kw) as writer:
        for r in records:
            writer.append(r)


def test_round_trip_keeps_every_field(tmp_path):
    records = all_patterns("x", seed=1) + all_patterns("y", seed=2)
    write(tmp_path / "calls.seg", records)
    back = read_store(tmp_path / "calls.seg")
    assert full_records(back["x"]) + full_records(back["y"]) == [
        r.__class__(**{**r.__dict__, "logprobs": tuple(np.float32(r.logprobs).tolist())}) for r in records]


def test_torn_last_record_is_skipped_at_every_byte_offset(tmp_path):
    path = tmp_path / "calls.seg"
    records = all_patterns(seed=3)
    write(path, records[:-1])
    intact = path.stat().st_size
    write(path, records[-1:])
    data = path.read_bytes()
    for cut in range(intact, len(data)):
        path.write_bytes(data[:cut])
        assert len(read_store(path)["e0"]) == len(records) - 1, cut
    # reopening after a crash drops the torn tail and appends cleanly after the intact records
    path.write_bytes(data[:intact + 5])
    write(path, records[-1:])
    assert full_records(read_store(path)["e0"])[-1].completion_token_ids == records[-1].completion_token_ids
    assert path.stat().st_size == len(data)


def test_corruption_before_the_end_raises(tmp_path):
    path = tmp_path / "calls.seg"
    write(path, all_patterns(seed=4))
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeFailure, match="corrupt record"):
        read_store(path)


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
    assert full_records(read_store(path)["long"])[-1] == records[-1].__class__(
        **{**records[-1].__dict__, "logprobs": tuple(np.float32(records[-1].logprobs).tolist())})


def test_writer_reopened_keeps_deduplicating(tmp_path):
    path = tmp_path / "calls.seg"
    records = all_patterns(seed=5)
    write(path, records[:6])
    size = path.stat().st_size
    write(path, records[6:7])
    one_call = path.stat().st_size - size
    new_tokens = read_store(path)["e0"][6].edit.suffix
    assert one_call < 4 * len(new_tokens) + 400  # the prefix was not stored again
