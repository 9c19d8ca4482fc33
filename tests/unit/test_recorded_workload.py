"""A run's own workload (``gyrectl simulate CONFIG --workload runs/NAME``): a small real run
directory written with the project's own writers (journal, capture store, executions.jsonl), with
known overlaps, and the durations alone checked against hand-computed values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import CaptureWriter
from gyrectl.coordinator.events import Dispatched, Finished, Started
from gyrectl.coordinator.journal import Journal
from gyrectl.errors import UserError
from gyrectl.sim.recorded import Call, Life, durations_alone, read_recorded_run, segments
from gyrectl.sim.workload import load_workload, read_workload, write_workload

REPO = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0
CONTRACT = {"policy", "makespan_s", "executions_trained", "throughput_per_hour", "gpu_idle_fraction", "lower_bound_s",
            "switches"}


def speed(n: int) -> float:
    """configs/local-tiny.yaml's rule: server_slowdown_at_full 0.5, concurrency_per_server 8."""
    return 1 / (1 + 0.5 * n / 8)


# (execution, seq, start, end, calls as (start, end, server, prompt tokens, completion tokens))
# Server s0: e000000 on it for [0, 6) (then on s1), the infra failure e000003 for [5, 10), e000004
# alone for [60, 72). Server s1: e000000 alone for [6, 10); e000001 [20, 55), e000002 [30, 50) and
# an evaluation's call [45, 48): loads 1, 2, 3, 2, 1 at 20, 30, 45, 48, 50.
EXECUTIONS = [
    ("e000000", 0, 0, 10, [(2, 4, "s0", [1, 2, 3], [4, 5]), (6, 8, "s1", [1, 2, 3, 4, 5, 6], [7])]),
    ("e000001", 1, 20, 55, [(21, 25, "s1", [9] * 10, [8] * 5)]),
    ("e000002", 2, 30, 50, [(31, 33, "s1", [9] * 4, [8] * 2)]),
    ("e000003", 3, 5, 10, [(5, 6, "s0", [1], [2])]),
    ("e000004", 4, 60, 72, [(61, 63, "s0", [1, 2], [3])]),
]
EVAL_CALL = ("eval-v0-0000", 45, 48, "s1")
RUNNING_CALL = ("e000005", 64, 66, "s1")
"""Dispatched and still running: the run is partial."""
DAMAGED_SEQ = 6
"""Finished, but its executions.jsonl line is damaged: left out, and counted."""
FINISH_ORDER = [0, 3, 2, 1, 4, DAMAGED_SEQ]


def write_run(run: Path, *, config_text: str | None = None, damage: bool = True) -> Path:
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(config_text or (REPO / "configs/local-tiny.yaml").read_text())
    by_seq = {seq: (execution, start, end) for execution, seq, start, end, _ in EXECUTIONS}
    with CaptureWriter(run / "trajectories" / "calls.seg", fsync=False) as writer:
        for execution, _, _, _, calls in EXECUTIONS:
            for start, end, server, prompt, completion in calls:
                writer.append(CallRecord(execution=execution, prompt_token_ids=tuple(prompt),
                                         completion_token_ids=tuple(completion), server=server,
                                         started_at=T0 + start, ended_at=T0 + end))
        for execution, start, end, server in (EVAL_CALL, RUNNING_CALL, ("e000006", 80, 81, "s1")):
            writer.append(CallRecord(execution=execution, prompt_token_ids=(1,), completion_token_ids=(2,),
                                     server=server, started_at=T0 + start, ended_at=T0 + end))
    lines = []
    for seq in FINISH_ORDER[:-1]:
        execution, start, end = by_seq[seq]
        status = "infra_failure" if seq == 3 else "timed_out" if seq == 1 else "ok"
        lines.append(json.dumps({"execution": execution, "seq": seq, "started_at": T0 + start, "ended_at": T0 + end,
                                 "status": status, "reward": None if seq == 3 else 1.0, "task": "t",
                                 "weight_version": 0}))
    lines.append('{"execution": "e000006", "seq": 6, "started_at": ' if damage else
                 json.dumps({"execution": "e000006", "seq": 6, "started_at": T0 + 79, "ended_at": T0 + 82}))
    lines.append(json.dumps({"execution": "e000000", "step": 0}))  # a step's claim: no life
    (run / "trajectories" / "executions.jsonl").write_text("\n".join(lines) + "\n")
    with Journal(run / "journal.jsonl", fsync=False) as journal:
        journal.append(Dispatched(count=7, version=0, at=T0))
        journal.append(Started(count=7, at=T0))
        for seq in FINISH_ORDER:
            end = by_seq[seq][2] if seq in by_seq else 82
            journal.append(Finished(seq=seq, version=0, timed_out=seq == 1, at=T0 + end, infra_failure=seq == 3,
                                    reward=None if seq == 3 else 1.0))
    if damage:
        with (run / "journal.jsonl").open("a") as f:
            f.write("{not json\n")
    return run


def test_durations_alone_follow_the_load_each_execution_ran_under(tmp_path):
    recorded = read_recorded_run(write_run(tmp_path / "tiny-run"))
    workload = recorded.workload
    s1, s2, s3 = speed(1), speed(2), speed(3)
    assert workload.name == "tiny-run"
    # dispatch order; the infra failure (3), the running one (5) and the damaged one (6) are left out
    assert len(workload) == 4 and recorded.left_out == 1
    expected = [
        9 * s1 + 1 * s2,            # e000000: s0 alone [0,5), with e000003 [5,6), then alone on s1 [6,10)
        15 * s1 + 17 * s2 + 3 * s3,  # e000001 (timed out, kept as it ran): [20,30) 1, [30,45) 2, [45,48) 3, ...
        17 * s2 + 3 * s3,           # e000002: [30,45) 2, [45,48) 3 (the evaluation), [48,50) 2
        12 * s1,                    # e000004: alone on its server the whole time
    ]
    assert workload.duration_s == pytest.approx(expected)
    # the trie of each execution's calls: e000000's second call extends its first (5 + 2 new tokens)
    assert workload.tokens == (7, 15, 6, 3)


def test_an_execution_alone_without_contention_takes_its_wall_time(tmp_path):
    config = (REPO / "configs/local-tiny.yaml").read_text() + "simulator:\n  server_slowdown_at_full: 0.0\n"
    workload = read_recorded_run(write_run(tmp_path / "run", config_text=config)).workload
    assert workload.duration_s == pytest.approx((10, 35, 20, 12))


def test_damaged_lines_are_skipped_and_reported(tmp_path):
    run = write_run(tmp_path / "run")
    skipped = read_recorded_run(run).skipped
    assert {Path(s.path).name for s in skipped} == {"journal.jsonl", "executions.jsonl"}
    clean = read_recorded_run(write_run(tmp_path / "clean", damage=False))
    assert clean.skipped == () and clean.left_out == 0 and len(clean.workload) == 5


def test_segments_follow_the_calls_servers():
    life = Life(0.0, 10.0, (Call(2, 4, "a"), Call(5, 6, "a"), Call(6, 8, "b")))
    assert segments(life) == [(0.0, 6, "a"), (6, 10.0, "b")]
    assert segments(Life(0.0, 3.0, ())) == []


def test_two_overlapping_executions_shrink_only_while_they_overlap():
    lives = {"a": Life(0.0, 10.0, (Call(0, 1, "s"),)), "b": Life(4.0, 20.0, (Call(5, 6, "s"),)),
             "c": Life(0.0, 7.0, ())}  # no calls: on no server, alone
    halve = lambda n: 1 / n  # noqa: E731
    assert durations_alone(lives, ["a", "b", "c"], halve) == pytest.approx([4 + 6 / 2, 6 / 2 + 10, 7])


def test_write_workload_round_trips(tmp_path):
    workload = read_recorded_run(write_run(tmp_path / "run")).workload
    write_workload(workload, tmp_path / "w.jsonl")
    again = read_workload(tmp_path / "w.jsonl")
    assert again.tokens == workload.tokens
    assert all(math.isclose(a, b) for a, b in zip(again.duration_s, workload.duration_s, strict=True))


def test_a_directory_that_is_no_run_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not a run directory"):
        load_workload(str(tmp_path), size=1, seed=0, time_limit_s=60)
    started = tmp_path / "started"
    started.mkdir()
    with Journal(started / "journal.jsonl", fsync=False) as journal:
        journal.append(Dispatched(count=2, version=0, at=T0))
    with pytest.raises(UserError, match="no finished training execution"):
        load_workload(str(started), size=1, seed=0, time_limit_s=60)


def test_simulate_replays_a_run_directory(tmp_path, cli):
    run = write_run(tmp_path / "tiny-run")
    result = cli("simulate", "configs/local-tiny.yaml", "--workload", str(run), "--policy", "colocate", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert CONTRACT <= data.keys() and data["workload"] == "tiny-run" and data["executions_trained"] > 0
    assert "journal.jsonl:" in result.stderr and "skipped 2 unreadable span(s); read 4 execution(s)" in result.stderr
    assert "1 finished execution(s) have no readable line" in result.stderr
    empty = cli("simulate", "configs/local-tiny.yaml", "--workload", str(tmp_path))
    assert empty.returncode == 2 and "not a run directory" in empty.stderr and "Traceback" not in empty.stderr
