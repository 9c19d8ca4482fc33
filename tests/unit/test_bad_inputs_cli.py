"""Bad inputs at the CLI are clear errors, never tracebacks: user text with rich markup in it, an
output_root that is a file, a calls file with values no tokenizer or weight version has, and the
run directory's own files damaged (status shows the rest and names them; resume refuses: exit 1,
since the run's own state is broken, not the user's command)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gyrectl.config import dump_config, load_config
from gyrectl.run.files import read_cells
from gyrectl.run.rundir import DamagedRunFile, RunDir
from tests.conftest import REPO

MARKUP = "[/x]"  # rich reads it as a closing tag: printed with markup on, it raised MarkupError


def _clean(result) -> None:
    assert "Traceback" not in result.stderr + result.stdout
    assert "internal error" not in result.stderr


def test_paths_with_markup_are_printed_as_text(cli, tmp_path: Path) -> None:
    folder = tmp_path / f"configs{MARKUP}"
    folder.mkdir(parents=True)
    missing = cli("config", "check", str(folder / "nope.yaml"))
    assert missing.returncode == 2 and f"config file not found: {folder / 'nope.yaml'}" in missing.stderr
    _clean(missing)
    shutil.copy(REPO / "configs/local-tiny.yaml", folder / "ok.yaml")
    ok = cli("config", "check", str(folder / "ok.yaml"), "--config-only")
    assert ok.returncode == 0 and MARKUP in ok.stdout, ok.stderr


def test_replay_prints_execution_ids_and_export_paths_as_text(cli, tmp_path: Path) -> None:
    folder = tmp_path / f"calls{MARKUP}"
    folder.mkdir(parents=True)
    calls = folder / "calls.jsonl"
    calls.write_text(json.dumps({"execution": f"task{MARKUP}", "prompt_token_ids": [1, 2],
                                 "completion_token_ids": [3]}) + "\n")
    result = cli("replay", str(calls), "--export", str(folder / "out.jsonl"))
    assert result.returncode == 0, result.stderr
    assert f"task{MARKUP}" in result.stdout and f"to {folder / 'out.jsonl'}" in result.stderr
    _clean(result)


@pytest.mark.parametrize("content,message", [
    (b'{"duration_s": NaN, "tokens": 5}\n', ":1: duration_s must be a finite number > 0"),
    (b'{"duration_s": 1, "tokens": 1e999}\n', ":1: each line needs numbers 'duration_s' and 'tokens'"),
    (b'{"duration_s": 1, "tokens": 5}\n\xff\n', "is not UTF-8 text"),
])
def test_simulate_refuses_a_bad_workload_file(cli, tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "workload.jsonl"
    path.write_bytes(content)
    result = cli("simulate", "configs/sim-32nodes.yaml", "--workload", str(path))
    assert result.returncode == 2 and message in " ".join(result.stderr.split())
    _clean(result)


def _run(root: Path, name: str = "r") -> RunDir:
    """A run directory as launch leaves it, without running anything."""
    run = RunDir.create(root, name)
    run.config_file.write_text(dump_config(load_config(REPO / "configs/local-tiny.yaml")))
    return run


def test_status_prints_paths_and_head_errors_as_text(cli, tmp_path: Path) -> None:
    run = _run(tmp_path / f"runs{MARKUP}")
    run.write_json(run.job_file, {"job_id": "local-999999999", "backend": "local", "layout": "cells"})
    run.journal_file.write_text(json.dumps({"event": "head_ended", "at": 1.0, "reason": "failed",
                                            "error": f"cannot read /data{MARKUP}/model"}) + "\n")
    result = cli("status", str(run.path))
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert f"cannot read /data{MARKUP}/model" in text and str(run.path) in text
    _clean(result)


def test_output_root_that_is_a_file_is_named(cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.write_text("not a directory\n")
    result = cli("launch", "configs/local-tiny.yaml", "--set", f"run.output_root={root}",
                 "--set", "rollout.harness_command=[]")
    assert result.returncode == 2 and f"run.output_root {root} is a file, not a directory" in result.stderr
    assert "already exists" not in result.stderr and root.read_text() == "not a directory\n"
    _clean(result)


GOOD_CALL = {"execution": "e", "prompt_token_ids": [1, 2], "completion_token_ids": [3]}
BAD_CALLS = [
    ({"prompt_token_ids": [1, 2, 2**31]}, "'prompt_token_ids'[2] = 2147483648 is not a token id"),
    ({"completion_token_ids": [-3]}, "'completion_token_ids'[0] = -3 is not a token id"),
    ({"weight_version": 2**64}, "'weight_version' must be a weight version"),
    ({"weight_version": -1}, "'weight_version' must be a weight version"),
    ({"segments": [1]}, "'segments' must be a list of objects"),
    ({"segments": [{"start": -1, "weight_version": 1}]}, "'segments'[0].start must be a completion token index"),
    ({"segments": [{"start": 0, "weight_version": "x"}]}, "'segments'[0].weight_version must be a weight version"),
    ({"tool_calls": [1]}, "'tool_calls' must be a list of objects"),
    ({"extra": "x"}, "'extra' must be an object"),
    ({"call_id": 5}, "'call_id' must be a string"),
    ({"sample_index": "x"}, "'sample_index' must be an integer"),
    ({"started_at": "x"}, "'started_at' must be a number"),
    ({"logprobs": [float("nan")]}, "'logprobs' must be a list of finite numbers"),
]


@pytest.mark.parametrize("change,message", BAD_CALLS, ids=[m.split(" must")[0].split(" =")[0] for _, m in BAD_CALLS])
def test_replay_skips_a_bad_call_naming_its_line(cli, tmp_path: Path, change: dict, message: str) -> None:
    """A bad line is skipped and named (file, line, key); the good one is still shown."""
    path = tmp_path / "calls.jsonl"
    path.write_text(json.dumps(GOOD_CALL) + "\n" + json.dumps({**GOOD_CALL, **change}) + "\n")
    result = cli("replay", str(path), "--json")
    assert result.returncode == 0 and f"{path}:2: {message}" in " ".join(result.stderr.split())
    report = json.loads(result.stdout)
    assert report["totals"]["calls"] == 1 and [s["line"] for s in report["skipped"]] == [2]
    assert message in report["skipped"][0]["reason"]
    _clean(result)
    alone = tmp_path / "bad.jsonl"
    alone.write_text(json.dumps({**GOOD_CALL, **change}) + "\n")
    result = cli("replay", str(alone))
    assert result.returncode == 2 and f"{alone}:1: {message}" in " ".join(result.stderr.split())
    _clean(result)


def test_replay_accepts_the_largest_token_id_and_a_call_without_tokens(cli, tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text(json.dumps({**GOOD_CALL, "prompt_token_ids": [2**31 - 1]}) + "\n"
                    + json.dumps({"execution": "empty", "prompt_token_ids": [], "completion_token_ids": []}) + "\n")
    result = cli("replay", str(path), "--json")
    assert result.returncode == 0, result.stderr
    counts = {e["execution"]: e["naive_tokens"] for e in json.loads(result.stdout)["executions"]}
    assert counts == {"e": 2, "empty": 0}


DAMAGED = [
    ("job.json", b"garbage", "not valid JSON (Expecting value at line 1, column 1)"),
    ("job.json", b"[1, 2]", "a list where an object belongs"),
    ("job.json", b'{"job_id": "local-abc", "backend": "local"}', "job_id 'local-abc' is not local-PID"),
    ("job.json", b'{"job_id": "1", "backend": "k8s"}', "unknown backend 'k8s'"),
    ("job.json", b'{"job_id": "\xe9"}', "not UTF-8 text"),
    ("nodes.json", b'{"a": 1}', "an object where a list belongs"),
    ("nodes.json", b"[1]", "entry 0: an integer where an object belongs"),
    ("nodes.json", b'[{"name": "x"}]', "entry 0: 'het_group' is None, expected an integer"),
    ("nodes.json", b"[" * 100_000, "nested too deeply"),
    ("servers.json", b'{"at": 1, "servers": [{"name": "s"}]}', "entry 0: 'state' is None, expected a string"),
    ("config.yaml", b"run: {steps: -1}\n", "not a valid config (run.steps: must be at least 1, got -1)"),
]


@pytest.mark.parametrize("name,content,problem", DAMAGED, ids=[f"{n}-{p[:20]}" for n, _, p in DAMAGED])
def test_status_shows_the_rest_of_a_run_and_names_a_damaged_file(cli, tmp_path: Path, name: str, content: bytes,
                                                                 problem: str) -> None:
    run = _run(tmp_path)
    if name != "job.json":
        run.write_json(run.job_file, {"job_id": "local-999999999", "backend": "local", "layout": "cells"})
    (run.path / name).write_bytes(content)
    as_json = cli("status", str(run.path), "--json")
    assert as_json.returncode == 0, as_json.stderr
    view = json.loads(as_json.stdout)
    assert problem in view["damaged"][name] and view["run_dir"] == str(run.path)
    assert view["job"]["state"] == ("unknown" if name == "job.json" else "ended")
    _clean(as_json)


def test_status_renders_every_damaged_file_by_name(cli, tmp_path: Path) -> None:
    run = _run(tmp_path)
    for name, content, _ in [DAMAGED[i] for i in (0, 7, 9, 10)]:  # a nodes.json row without its fields
        (run.path / name).write_bytes(content)                       # crashed the table once
    run.metrics_file.write_bytes(b'{"step": 1}\n')
    shown = cli("status", str(run.path), env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    for name in ("job.json", "nodes.json", "servers.json", "config.yaml"):
        assert f"{name} is damaged" in shown.stdout
    assert "metrics.jsonl:1: not a finished step's metrics: 'reward_mean' is None" in shown.stdout
    _clean(shown)


def test_status_skips_a_metrics_line_without_a_steps_fields(cli, tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.metrics_file.write_bytes(b'{"step": 1}\n')
    view = json.loads(cli("status", str(run.path), "--json").stdout)
    assert [(s["line"], "'reward_mean' is None" in s["reason"]) for s in view["skipped"]] == [(1, True)]
    assert view["steps"] == [] and view["damaged"] == {}


def test_resume_refuses_a_run_whose_job_file_is_damaged(cli, tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.job_file.write_text('{"job_id": ')
    result = cli("launch", "--resume", str(run.path))
    assert result.returncode == 1 and f"{run.job_file} is damaged: not valid JSON" in result.stderr
    assert "starts no second head" in " ".join(result.stderr.split())
    assert run.job_file.read_text() == '{"job_id": ' and not (run.logs_dir / "head.log").exists()
    _clean(result)


def test_resume_refuses_a_damaged_config(cli, tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.config_file.write_text("run: [")
    result = cli("launch", "--resume", str(run.path))
    assert result.returncode == 1 and f"{run.config_file} is damaged: not a valid config" in result.stderr
    _clean(result)


def test_stop_with_a_damaged_job_file_asks_the_head_and_says_what_it_cannot_do(cli, tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.job_file.write_text("garbage")
    result = cli("stop", str(run.path))
    assert result.returncode == 1 and f"{run.job_file} is damaged" in " ".join(result.stderr.split())
    assert run.stop_file.exists()
    _clean(result)


def test_a_damaged_cells_file_is_named(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.cells_file.write_text('[{"cell": "0", "job_id": "12"}]')
    with pytest.raises(DamagedRunFile) as info:
        read_cells(run)
    assert info.value.path == run.cells_file and "entry 0: 'cell' is '0', expected an integer" in str(info.value)
