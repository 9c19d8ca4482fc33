"""``gyrectl replay``: --json counts on a hand-computed example, run-directory and capture store
input, export round trip, and readable errors (exit 2, no traceback) for bad input."""

from __future__ import annotations

import json

import pytest

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import CaptureWriter, scan
from gyrectl.cli.app import main

CALLS = [
    {"execution": "a", "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4, 5], "weight_version": 0},
    {"execution": "a", "prompt_token_ids": [1, 2, 3, 4, 5, 6], "completion_token_ids": [7], "weight_version": 1},
    {"execution": "a", "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4, 8], "role": "main"},
    {"execution": "b", "prompt_token_ids": [9], "completion_token_ids": [10, 11], "logprobs": [-0.5, -1.0]},
]
# By hand: naive a = 5 + 7 + 5, b = 3; trie a = 1 2 3 4 5 6 7 and 8 under 1 2 3 4, b = 9 10 11;
# trained: a = {4, 5, 7, 8} (4 is sampled twice, stored once), b = {10, 11}.
EXPECTED = {"a": (3, 17, 8, 4), "b": (1, 3, 3, 2)}


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def replay_json(argv, capsys):
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None)
    return json.loads(capsys.readouterr().out)


def write_lines(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def check_counts(report):
    by_id = {e["execution"]: e for e in report["executions"]}
    for execution, (calls, naive, unique, trained) in EXPECTED.items():
        e = by_id[execution]
        assert (e["calls"], e["naive_tokens"], e["unique_tokens"], e["trained_tokens_exact"]) == \
               (calls, naive, unique, trained)
    totals = report["totals"]
    assert (totals["executions"], totals["calls"], totals["naive_tokens"], totals["unique_tokens"],
            totals["trained_tokens_exact"]) == (2, 4, 20, 11, 6)


def test_json_counts_of_a_jsonl_file(tmp_path, capsys):
    check_counts(replay_json(["replay", str(write_lines(tmp_path / "calls.jsonl", CALLS)), "--json"], capsys))


def test_run_directory_and_export_round_trip(tmp_path, capsys):
    run = tmp_path / "run"
    with CaptureWriter(run / "trajectories" / "calls.seg", fsync=False) as writer:
        for obj in CALLS:
            writer.append(CallRecord.from_json(obj))
    write_lines(run / "trajectories" / "executions.jsonl",
                [{"execution": "a", "step": 2, "reward": 1.0}, {"execution": "b", "step": 3, "reward": 0.0}])
    exported = tmp_path / "out.jsonl"
    check_counts(replay_json(["replay", str(run), "--json", "--export", str(exported)], capsys))
    check_counts(replay_json(["replay", str(exported), "--json"], capsys))
    only = replay_json(["replay", str(run), "--json", "--step", "2"], capsys)
    assert [e["execution"] for e in only["executions"]] == ["a"] and only["executions"][0]["reward"] == 1.0


@pytest.mark.parametrize("name", ["calls.seg", "calls.bin"])
def test_a_capture_store_file_replays_as_its_run_directory_does(tmp_path, capsys, name):
    """What ``python -m gyrectl.gateway --records calls.seg`` writes (its CaptureWriter), alone;
    told from JSONL by its first record's magic, whatever the file is called."""
    store = tmp_path / name
    with CaptureWriter(store, fsync=False) as writer:
        for obj in CALLS:
            writer.append(CallRecord.from_json(obj))
    report = replay_json(["replay", str(store), "--json"], capsys)
    check_counts(report)
    assert report["skipped"] == [] and {e["reward"] for e in report["executions"]} == {None}
    (tmp_path / "empty.seg").write_bytes(b"")  # a gateway that recorded nothing yet
    code, out, err = run_cli(["replay", str(tmp_path / "empty.seg")], capsys)
    assert code == 2 and out == "" and "no recorded calls (expected capture store records)" in err


def test_human_view_shows_tree_and_stats(tmp_path, capsys):
    code = None
    try:
        main(["replay", str(write_lines(tmp_path / "calls.jsonl", CALLS))])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr().out
    assert code in (0, None)
    assert "retry" in out and "dedup per step" in out and "20" in out


@pytest.mark.parametrize("line, key", [
    ("{not json", "not valid JSON"),
    ({"prompt_token_ids": [1], "completion_token_ids": [2]}, "'execution'"),
    ({"execution": "a", "prompt_token_ids": "1 2", "completion_token_ids": [2]}, "'prompt_token_ids'"),
    ({"execution": "a", "prompt_token_ids": [1], "completion_token_ids": [2], "logprobs": ["x"]}, "'logprobs'"),
    ({"execution": "a", "prompt_token_ids": [1], "completion_token_ids": [2], "weight_version": "v1"},
     "'weight_version'"),
    ({"execution": "a", "prompt_token_ids": [1], "completion_token_ids": [2], "role": "boss"}, "'role'"),
    ([1, 2], "not a JSON object"),
])
def test_a_bad_line_is_skipped_and_named_and_the_rest_is_shown(tmp_path, capsys, line, key):
    path = write_lines(tmp_path / "calls.jsonl", [CALLS[0], line, CALLS[3]])
    code, out, err = run_cli(["replay", str(path), "--json"], capsys)
    assert code in (0, None)
    report = json.loads(out)
    assert [(e["execution"], e["calls"]) for e in report["executions"]] == [("a", 1), ("b", 1)]
    assert [(s["line"], key in s["reason"]) for s in report["skipped"]] == [(2, True)]
    assert "calls.jsonl:2" in err and key in err and "Traceback" not in err


def test_a_torn_last_line_is_skipped_not_refused(tmp_path, capsys):
    path = tmp_path / "calls.jsonl"
    path.write_text(json.dumps(CALLS[0]) + "\n" + json.dumps(CALLS[1])[:25])
    code, out, err = run_cli(["replay", str(path), "--json"], capsys)
    assert code in (0, None) and json.loads(out)["totals"]["calls"] == 1
    assert "calls.jsonl:2: incomplete last record" in err


def test_a_file_with_no_readable_call_is_a_usage_error_naming_the_first_problem(tmp_path, capsys):
    path = write_lines(tmp_path / "calls.jsonl",
                       [{"execution": "a", "prompt_token_ids": "1 2", "completion_token_ids": [2]}])
    code, out, err = run_cli(["replay", str(path), "--json"], capsys)
    assert code == 2 and out == "" and "no recorded calls" in err and "calls.jsonl:1" in err
    assert "'prompt_token_ids'" in err and "Traceback" not in err


def test_a_damaged_store_is_read_around_the_damage_and_reported(tmp_path, capsys):
    run = tmp_path / "run"
    store = run / "trajectories" / "calls.seg"
    with CaptureWriter(store, fsync=False) as writer:
        for obj in CALLS:
            writer.append(CallRecord.from_json(obj))
    offsets = [r.offset for r in scan(store).records]
    data = bytearray(store.read_bytes())
    data[offsets[0] + 30] ^= 0x01  # a's first call, which a's two later calls extend
    store.write_bytes(bytes(data))
    code, out, err = run_cli(["replay", str(run), "--json"], capsys)
    assert code in (0, None)
    report = json.loads(out)
    assert [(e["execution"], e["calls"]) for e in report["executions"]] == [("b", 1)]
    assert [(s["offset"], s["bytes"]) for s in report["skipped"]] == [(0, offsets[1])]
    assert report["unrecoverable_calls"] == {"a": 2}
    assert "skipped 1 unreadable span(s); read 1 call(s)" in err and "cannot be rebuilt: a (2)" in err


def test_missing_or_empty_source_is_a_usage_error(tmp_path, capsys):
    code, _, err = run_cli(["replay", str(tmp_path / "nope")], capsys)
    assert code == 2 and "no such run directory" in err
    (tmp_path / "empty.jsonl").write_text("")
    code, _, err = run_cli(["replay", str(tmp_path / "empty.jsonl")], capsys)
    assert code == 2 and "no recorded calls" in err
    (tmp_path / "run" / "trajectories").mkdir(parents=True)
    code, _, err = run_cli(["replay", str(tmp_path / "run")], capsys)
    assert code == 2 and "no recorded calls" in err


def test_a_step_that_is_no_step_number_is_skipped(tmp_path, capsys):
    path = write_lines(tmp_path / "calls.jsonl", [{**CALLS[0], "step": 2**64}, {**CALLS[3], "step": -1}, CALLS[1]])
    code, out, err = run_cli(["replay", str(path), "--json"], capsys)
    assert code in (0, None) and [s["line"] for s in json.loads(out)["skipped"]] == [1, 2]
    assert "'step' must be a training step number" in err
