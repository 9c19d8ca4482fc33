from __future__ import annotations

from pathlib import Path

import pytest

from gyrectl.errors import RuntimeFailure
from gyrectl.store.jsonl import JsonlAppender, read_records


def test_a_torn_last_record_is_skipped_at_every_cut(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    with JsonlAppender(path) as journal:
        for i in range(3):
            journal.append({"i": i, "pad": "x" * i})
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    for cut in range(last_start, len(data)):
        path.write_bytes(data[:cut])
        assert [r["i"] for r in read_records(path)] == [0, 1]


def test_appending_after_a_crash_keeps_every_complete_record(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    with JsonlAppender(path) as journal:
        journal.append({"i": 0})
    path.write_bytes(path.read_bytes() + b'{"i": 1, "tor')  # the crash
    with JsonlAppender(path) as journal:
        journal.append({"i": 2})
    assert [r["i"] for r in read_records(path)] == [0, 2]


def test_corruption_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"i": 0}\nnot json\n{"i": 2}\n')
    with pytest.raises(RuntimeFailure, match="j.jsonl:2"):
        list(read_records(path))
