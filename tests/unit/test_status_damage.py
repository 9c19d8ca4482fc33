"""``gyrectl status`` on a run whose journal and metrics took damage: everything readable is
shown, and what was skipped is said (where, why, how many records were read), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from gyrectl.config import dump_config, load_config
from gyrectl.coordinator.events import Dispatched, PhaseChanged
from gyrectl.coordinator.journal import Journal, read_journal
from gyrectl.coordinator.state import Phase
from gyrectl.run.rundir import RunDir

T0 = 1_796_000_000.0
STEP = {"step": 0, "reward_mean": 0.5, "executions": 4, "naive_tokens": 100, "trained_tokens": 40,
        "weight_version": 1, "duration_s": 2.5}


def _run_with_damage(tmp_path: Path) -> RunDir:
    run = RunDir.create(tmp_path, "damaged")
    run.config_file.write_text(dump_config(load_config("configs/local-tiny.yaml")))
    with Journal(run.journal_file) as journal:
        for event in (PhaseChanged(cell=0, phase=Phase.STARTING, at=T0),
                      PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=T0 + 1),
                      Dispatched(count=8, version=0, at=T0 + 2),
                      PhaseChanged(cell=1, phase=Phase.STARTING, at=T0 + 3)):
            journal.append(event)
    lines = run.journal_file.read_bytes().split(b"\n")
    lines[1] = lines[1][:10] + b"\xff" + lines[1][11:]  # one damaged byte in the second event
    lines.insert(3, b"[1, 2]")  # a line that is JSON but no record
    lines.insert(4, b'{"event": "PhaseChanged", "cell": 1}')  # an event record missing its fields
    run.journal_file.write_bytes(b"\n".join(lines))
    run.metrics_file.write_text(json.dumps(STEP) + "\n" + json.dumps({"step": 1, "reward_mean": "x"}) + "\n"
                                + json.dumps({**STEP, "step": 2})[:30])  # torn
    return run


def test_status_json_shows_the_rest_and_lists_what_was_skipped(cli, tmp_path: Path) -> None:
    run = _run_with_damage(tmp_path)
    result = cli("status", str(run.path), "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert "Traceback" not in result.stderr
    skipped = [(Path(s["file"]).name, s["line"]) for s in view["skipped"]]
    assert skipped == [("journal.jsonl", 2), ("journal.jsonl", 4), ("journal.jsonl", 5),
                       ("metrics.jsonl", 2), ("metrics.jsonl", 3)]
    assert view["records_read"] == {"journal.jsonl": 3, "metrics.jsonl": 1}
    assert [s["step"] for s in view["steps"]] == [0]
    assert view["executions"]["dispatched"] == 8  # the events after the damaged one still count
    assert [c["phase"] for c in view["cells"]] == ["starting", "starting"]  # cell 0's move to rollout was lost


def test_status_says_what_was_skipped_in_plain_words(cli, tmp_path: Path) -> None:
    run = _run_with_damage(tmp_path)
    result = cli("status", str(run.path), env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert ("skipped 5 unreadable span(s); read 3 record(s) of journal.jsonl, 1 record(s) of metrics.jsonl"
            in result.stdout)
    assert "journal.jsonl:4: not a JSON object" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_the_head_reopening_a_damaged_journal_appends_after_every_readable_event(tmp_path: Path) -> None:
    run = _run_with_damage(tmp_path)
    before = read_journal(run.journal_file)
    with Journal(run.journal_file) as journal:
        journal.append(PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=T0 + 9))
    after = read_journal(run.journal_file)
    assert after.events == before.events + [PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=T0 + 9)]
    assert [s.line for s in after.skipped] == [s.line for s in before.skipped]
