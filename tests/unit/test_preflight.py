"""Before anything is created: ``config check`` and ``launch`` read the model folder, every task
line, the verifier (in a process of its own) and the harness command, and refuse a bad one with
its field and ``FILE:LINE`` (exit 2, no run directory); ``launch --replace`` starts an ended run
afresh under its name, and refuses one whose job still runs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from gyrectl.config import dump_config, load_config
from gyrectl.launch.preflight import verifier_problem
from gyrectl.run.rundir import RunDir
from tests.conftest import REPO

CONFIG = str(REPO / "configs/local-tiny.yaml")
"""Its inputs are relative to the launch directory: each test makes one in ``tmp_path``."""
DECODER = {"model_type": "qwen2", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096}
"""A config.json the memory plan can read: the files are checked here, not the weights."""


@pytest.fixture
def launch_dir(tmp_path: Path) -> Path:
    """What local-tiny.yaml names, in a launch directory of its own: the example agent and a model
    folder with a config and a tokenizer."""
    shutil.copytree(REPO / "examples/agent", tmp_path / "examples/agent")
    model = tmp_path / "models/tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(DECODER))
    (model / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    return tmp_path


def _replace_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")


def _no_tokenizer(d: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (d / "models/tiny" / name).unlink()


BAD_INPUTS = {
    "model path": (lambda d: None, ["model.path=models/nope"],
                   ["model.path: ", "models/nope is not an HF model folder (no config.json)"]),
    "no tokenizer": (_no_tokenizer, [], ["model.path: ", "has no tokenizer"]),
    "tokenizer not JSON": (lambda d: (d / "models/tiny/tokenizer.json").write_text("{"), [],
                           ["model.path: ", "models/tiny/tokenizer.json is not JSON"]),
    "tasks line": (lambda d: _replace_line(d / "examples/agent/tasks.jsonl", 6, '{"id": "sub-2", "prompt": }'), [],
                   ["rollout.tasks: ", "examples/agent/tasks.jsonl:6: not JSON (Expecting value, column 27)"]),
    "eval tasks line": (lambda d: _replace_line(d / "examples/agent/eval_tasks.jsonl", 2, '["eval-mul"]'), [],
                        ["eval.tasks: ", "eval_tasks.jsonl:2: a task is a JSON object with an 'id'"]),
    "verifier function": (lambda d: None, ["rollout.verifier=examples/agent/verifier.py:reward"],
                          ["rollout.verifier: ", "has no function 'reward' (functions defined there: score)"]),
    "harness program": (lambda d: None, ["rollout.harness_command=[no-such-agent, --fast]"],
                        ["rollout.harness_command: no program 'no-such-agent'"]),
    "harness script": (lambda d: None, ["rollout.harness_command=[python, agent/missing.py]"],
                       ["rollout.harness_command: no script ", "agent/missing.py"]),
}


def _sets(overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def _refused(result, fragments: list[str], launch_dir: Path) -> None:
    stderr = " ".join(result.stderr.split())
    assert result.returncode == 2, result.stdout + result.stderr
    assert all(fragment in stderr for fragment in fragments), stderr
    assert "Traceback" not in result.stderr and not (launch_dir / "runs").exists()


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_config_check_refuses_a_bad_input_naming_field_and_line(cli, launch_dir: Path, name: str) -> None:
    spoil, overrides, fragments = BAD_INPUTS[name]
    spoil(launch_dir)
    _refused(cli("config", "check", CONFIG, *_sets(overrides), cwd=launch_dir), fragments, launch_dir)


def test_launch_refuses_every_bad_input_at_once_before_creating_anything(cli, launch_dir: Path) -> None:
    chosen = ["no tokenizer", "tasks line", "verifier function", "harness program"]
    for name in chosen:
        BAD_INPUTS[name][0](launch_dir)
    overrides = [o for name in chosen for o in BAD_INPUTS[name][1]]
    result = cli("launch", CONFIG, *_sets(overrides), cwd=launch_dir)
    _refused(result, ["4 problems with the run's inputs"] + [f for name in chosen for f in BAD_INPUTS[name][2]],
             launch_dir)


def test_a_good_config_passes(cli, launch_dir: Path, tiny_model_dir: Path) -> None:
    result = cli("config", "check", CONFIG, "--set", f"model.path={tiny_model_dir}", cwd=launch_dir)
    assert result.returncode == 0 and result.stdout.startswith("ok "), result.stderr
    assert not (launch_dir / "runs").exists()


def test_config_only_checks_a_config_whose_files_are_elsewhere(cli, tmp_path: Path) -> None:
    assert cli("config", "check", CONFIG, "--config-only", cwd=tmp_path).returncode == 0


# -- the verifier's own process ----------------------------------------------------------------

@pytest.mark.parametrize("module,problem", [
    ("import time\ntime.sleep(60)\n", "loading v.py:score did not finish in 0.5 s"),
    ("import sys\nprint('leaving')\nsys.exit(3)\n", "ended its process (exit code 3)\n    leaving"),
    ('print(\'{"problem": "a module\\\'s own print"}\')\ndef score(task, output):\n    return 1.0\n', ""),
], ids=["hangs", "exits", "prints"])
def test_the_verifier_is_loaded_in_a_process_of_its_own(tmp_path: Path, module: str, problem: str) -> None:
    (tmp_path / "v.py").write_text(module)
    found = verifier_problem("v.py:score", tmp_path, timeout_s=0.5)
    assert (problem in found and found.startswith("rollout.verifier: ")) if problem else found == ""


# -- launch --replace ----------------------------------------------------------------------------

IDLE = ("--set", "rollout.harness_command=[]")  # the head holds its virtual nodes: nothing to read


def _ended_run(root: Path) -> RunDir:
    """A run directory as a failed launch leaves it: its head gone, a file of its own in it."""
    run = RunDir.create(root, "tiny")
    run.config_file.write_text(dump_config(load_config(CONFIG)))
    run.write_json(run.job_file, {"job_id": "local-999999999", "backend": "local", "layout": "cells"})
    (run.path / "left-by-the-failed-run").write_text("")
    return run


def _end_head(job_id: str) -> None:
    pid = int(job_id.removeprefix("local-"))
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, f"the head {pid} did not end"
        time.sleep(0.1)


def test_replace_starts_an_ended_run_afresh_and_refuses_a_running_one(cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    old = _ended_run(root)
    root_set = ("--set", f"run.output_root={root}")
    again = cli("launch", CONFIG, *root_set, *IDLE)
    message = " ".join(again.stderr.split())
    assert again.returncode == 2 and "already exists" in message
    assert "--replace" in message and f"gyrectl launch --resume {old.path}" in message
    replaced = cli("launch", CONFIG, *root_set, *IDLE, "--replace", "--json")
    assert replaced.returncode == 0, replaced.stderr
    job_id = json.loads(replaced.stdout)["job_id"]
    try:
        assert not (old.path / "left-by-the-failed-run").exists() and old.config_file.exists()
        running = cli("launch", CONFIG, *root_set, *IDLE, "--replace")
        assert running.returncode == 2 and f"tiny is still running (job {job_id})" in running.stderr
        assert f"gyrectl stop {old.path}" in " ".join(running.stderr.split())
        assert json.loads(old.job_file.read_text())["job_id"] == job_id
    finally:
        _end_head(job_id)


def test_replace_reads_the_inputs_before_removing_anything(cli, launch_dir: Path) -> None:
    old = _ended_run(launch_dir / "runs")
    _replace_line(launch_dir / "examples/agent/tasks.jsonl", 6, "{")
    result = cli("launch", CONFIG, "--replace", cwd=launch_dir)
    assert result.returncode == 2 and "rollout.tasks: " in result.stderr and "tasks.jsonl:6:" in result.stderr
    assert (old.path / "left-by-the-failed-run").exists()


def test_replace_refuses_a_run_whose_job_file_is_damaged(cli, tmp_path: Path) -> None:
    old = _ended_run(tmp_path / "runs")
    old.job_file.write_text('{"job_id": ')
    result = cli("launch", CONFIG, "--set", f"run.output_root={tmp_path / 'runs'}", *IDLE, "--replace")
    message = " ".join(result.stderr.split())
    assert result.returncode == 1 and f"{old.job_file} is damaged" in message
    assert "launch with --replace again" in message and (old.path / "left-by-the-failed-run").exists()


def test_replace_leaves_a_folder_that_is_not_a_run_alone(cli, tmp_path: Path) -> None:
    folder = tmp_path / "runs/tiny"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("mine\n")
    result = cli("launch", CONFIG, "--set", f"run.output_root={tmp_path / 'runs'}", *IDLE, "--replace")
    assert result.returncode == 2 and "not a gyrectl run directory (no config.yaml)" in result.stderr
    assert (folder / "notes.txt").read_text() == "mine\n"
