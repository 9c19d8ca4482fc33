"""JSON-lines files: a torn tail, a damaged byte anywhere, and reopening for append never cost a
record outside the damage (examples, then property tests over random damage)."""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path

from hypothesis import given, strategies as st

from gyrectl.store.damage import TORN_TAIL
from gyrectl.store.jsonl import JsonlAppender, JsonlTail, read_records, scan_jsonl

import damage
from damage import damage_settings


def write(path: Path, records: list[dict]) -> list[tuple[int, int]]:
    """Appends ``records``; returns each one's byte span, its newline included."""
    spans = []
    with JsonlAppender(path, fsync=False) as journal:
        for record in records:
            start = path.stat().st_size
            journal.append(record)
            spans.append((start, path.stat().st_size))
    return spans


def test_a_torn_last_record_is_skipped_at_every_cut(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    write(path, [{"i": i, "pad": "x" * i} for i in range(3)])
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    for cut in range(last_start + 1, len(data) - 1):
        path.write_bytes(data[:cut])
        contents = scan_jsonl(path)
        assert [r["i"] for r in contents.records] == [0, 1], cut
        assert [s.reason for s in contents.skipped] == [TORN_TAIL]
    # Only its newline missing: the record is whole, and kept.
    path.write_bytes(data[:-1])
    assert [r["i"] for r in read_records(path)] == [0, 1, 2]


def test_appending_after_a_crash_keeps_every_complete_record(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    write(path, [{"i": 0}])
    path.write_bytes(path.read_bytes() + b'{"i": 1, "tor')  # the crash
    write(path, [{"i": 2}])
    assert [r["i"] for r in read_records(path)] == [0, 2]
    assert scan_jsonl(path).skipped == []


def test_a_record_missing_only_its_newline_is_kept_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"i":0}\n{"i":1}')  # written by hand, say, without a final newline
    write(path, [{"i": 2}])
    assert [r["i"] for r in read_records(path)] == [0, 1, 2]


def test_a_bad_line_in_the_middle_costs_only_itself_and_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"i": 0}\nnot json\n[1, 2]\n{"i": 3}\n')
    contents = scan_jsonl(path)
    assert [r["i"] for r in contents.records] == [0, 3]
    assert [(s.line, s.offset, s.reason) for s in contents.skipped] == [
        (2, 9, "not valid JSON"), (3, 18, "not a JSON object")]


def test_a_damaged_line_end_glues_two_records_and_both_are_read(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"i":0}\n{"i":1}\x07{"i":2}\n')
    contents = scan_jsonl(path)
    assert [r["i"] for r in contents.records] == [0, 1, 2]
    assert [(s.offset, s.length) for s in contents.skipped] == [(15, 1)]


def test_an_unparseable_last_line_does_not_break_the_next_append(tmp_path: Path) -> None:
    """Before: the reader skipped it, the appender kept it, the next append made it mid-file
    corruption and status refused the whole journal."""
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"i":0}\n{"i":1, "x": tru\n')
    write(path, [{"i": 2}])
    contents = scan_jsonl(path)
    assert [r["i"] for r in contents.records] == [0, 2]
    assert [s.line for s in contents.skipped] == [2]


def test_invalid_utf8_and_deep_nesting_are_skipped_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"i":0}\n{"s":"\xff\xfe"}\n' + b"[" * 200_000 + b"\n" + b'{"i":3}\n')
    contents = scan_jsonl(path)
    assert [r.get("i") for r in contents.records] == [0, None, 3]  # a lone byte inside a string survives as-is
    assert [s.line for s in contents.skipped] == [3]


# -- property tests: random damage ----------------------------------------------------------------

def _records(seed: int, count: int) -> list[dict]:
    """Records shaped like the run's files (numbers, nested lists and objects, strings full of
    JSON's own punctuation), from a seed: drawing them with hypothesis costs 20x more."""
    rng = random.Random(seed)

    def text() -> str:
        return "".join(rng.choice('ab{}[]:,"\\\n 0é漢') for _ in range(rng.randrange(10)))

    return [{"event": rng.choice(["Dispatched", "PhaseChanged", "head_started"]), "at": rng.random() * 1e9,
             "seq": rng.randrange(-5, 10**6), "nodes": [text() for _ in range(rng.randrange(3))],
             "task": ({"prompt": text(), "answer": [rng.randrange(100), {"deep": text()}]}
                      if rng.random() < 0.5 else None),
             "ok": rng.random() < 0.5}
            for _ in range(count)]


_RECORDS = st.builds(_records, st.integers(0, 2**32), st.integers(1, 12))


def _check_damage(records: list[dict], damage) -> None:
    """Writes ``records``, applies ``damage(data) -> (damaged data, damaged byte range)``, then
    reads the file and reopens it for append."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "j.jsonl"
        spans = write(path, records)
        damaged, hit = damage(path.read_bytes())
        path.write_bytes(damaged)
        _assert_survivors(records, spans, hit, scan_jsonl(path).records)
        _assert_reopening_keeps_them(path, records, spans, hit)


def _assert_survivors(records: list[dict], spans, hit: range, read: list[dict]) -> None:
    intact = [r for r, (start, end) in zip(records, spans, strict=True) if not (start < hit.stop and hit.start < end)]
    it = iter(read)
    assert all(any(r == got for got in it) for r in intact), "an undamaged record was lost"


@damage_settings
@given(records=_RECORDS, where=damage.where, byte=damage.byte)
def test_a_random_byte_costs_at_most_its_own_record(records, where, byte) -> None:
    _check_damage(records, lambda data: damage.flipped(data, where, byte))


@damage_settings
@given(records=_RECORDS, where=damage.where)
def test_a_truncation_costs_at_most_the_record_it_cuts(records, where) -> None:
    _check_damage(records, lambda data: damage.truncated(data, where))


def _assert_reopening_keeps_them(path: Path, records, spans, hit: range) -> None:
    """Reopening for append never shrinks the file below its last undamaged record, and every
    record read before is still read after, followed by the new one."""
    before = scan_jsonl(path).records
    last_intact_end = max((end - 1 for start, end in spans if end <= hit.start or start >= hit.stop), default=0)
    write(path, [{"event": "appended"}])
    assert os.path.getsize(path) >= last_intact_end
    after = scan_jsonl(path).records
    assert after[:len(before)] == before and after[-1] == {"event": "appended"}, (before, after)
    _assert_survivors(records, spans, hit, after)
    json.dumps(after)  # everything read is plain JSON again


def test_a_tail_returns_whole_new_lines_as_another_process_writes_them(tmp_path: Path, caplog) -> None:
    path = tmp_path / "ended.jsonl"
    tail = JsonlTail(path)
    assert tail.new() == []  # not written yet
    with open(path, "wb") as out:
        out.write(b'{"a": 1}\n{"b": ')
        out.flush()
        assert tail.new() == [{"a": 1}]  # the half-written line waits for its newline
        out.write(b'2}\nnot json\n{"c": 3}\n')
        out.flush()
        assert tail.new() == [{"b": 2}, {"c": 3}]  # the damaged line is skipped, and reported
        assert tail.new() == []
    assert "not valid JSON" in caplog.text


def test_the_last_matching_record_is_found_from_the_end_across_blocks(tmp_path: Path) -> None:
    from gyrectl.store import jsonl

    path = tmp_path / "journal.jsonl"
    records = [{"event": "step", "i": i, "pad": "x" * (i % 300)} for i in range(3000)]
    records[10] = {"event": "head_ended", "reason": "first"}
    records[2500] = {"event": "head_ended", "reason": "second", "pad": "y" * 200_000}  # longer than a block
    write(path, records)
    with open(path, "ab") as out:
        out.write(b'{"event": "head_ended", "reason": "torn')  # a torn tail is no record
    is_end = lambda r: r.get("event") == "head_ended"  # noqa: E731
    assert jsonl.last_record(path, b"head_ended", is_end)["reason"] == "second"
    for block in (97, 4096, 1 << 16):  # every way the lines can straddle the blocks
        jsonl._BACK_BLOCK, saved = block, jsonl._BACK_BLOCK
        try:
            assert jsonl.last_record(path, b"head_ended", is_end)["reason"] == "second"
            assert jsonl.last_record(path, b'"i":7,', lambda r: r.get("i") == 7)["i"] == 7
            assert jsonl.last_record(path, b"head_ended", lambda r: r.get("reason") == "first")["reason"] == "first"
        finally:
            jsonl._BACK_BLOCK = saved
    assert jsonl.last_record(path, b"nowhere", is_end) is None
    assert jsonl.last_record(tmp_path / "missing.jsonl", b"x", is_end) is None
