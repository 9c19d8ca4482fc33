"""The CLI as a user meets it: help everywhere, JSON only on stdout, exit codes, the local backend."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

COMMANDS = [[], ["launch"], ["status"], ["stop"], ["config"], ["config", "check"], ["config", "show"],
            ["config", "docs"], ["model"], ["model", "tiny"], ["model", "smollm2"], ["plan"], ["replay"], ["simulate"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "gyrectl")
def test_every_command_has_help_with_an_example(cli, command: list[str]) -> None:
    result = cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    leaf = len(command) >= 2 or command in (["launch"], ["status"], ["stop"], ["plan"], ["replay"], ["simulate"])
    if leaf:
        assert "Example" in result.stdout


def test_unknown_command_and_option_are_usage_errors(cli) -> None:
    assert cli("lanch").returncode == 2
    assert cli("status", "--bogus").returncode == 2


def test_config_check_json_is_pure_data(cli) -> None:
    result = cli("config", "check", "configs/slurm-local.yaml", "--json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert data["valid"] and data["cells"] == 4 and data["gpus"] == 8


def test_status_of_a_missing_run_is_a_user_error(cli, tmp_path: Path) -> None:
    result = cli("status", "nope", "--root", str(tmp_path))
    assert result.returncode == 2 and "no gyrectl run" in result.stderr and "Traceback" not in result.stderr


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_local_backend_launch_status_stop(cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    # Without a harness the head holds its virtual nodes idle: launch, status and stop alone.
    idle = ("--set", "rollout.harness_command=[]")
    result = cli("launch", "configs/local-tiny.yaml", "--json", "--set", f"run.output_root={root}", *idle)
    assert result.returncode == 0, result.stderr
    launched = json.loads(result.stdout)
    run_dir = Path(launched["run_dir"])
    assert launched["job_id"].startswith("local-") and run_dir == root / "tiny"
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert (run_dir / "config.yaml").read_text().startswith("run:")
    _wait_for(lambda: (run_dir / "nodes.json").exists())

    view = json.loads(cli("status", "tiny", "--root", str(root), "--json").stdout)
    assert view["run_dir"] == str(run_dir) and view["job"]["state"] == "running"
    assert view["job"]["backend"] == "local" and view["job"]["id"] == launched["job_id"]
    names = [(n["name"], n["het_group"]) for n in view["nodes"]]
    assert names == [("local-head", 0), ("local-0", 1), ("local-1", 1)]
    assert {n["role"] for n in view["nodes"]} == {"idle"}

    again = cli("launch", "configs/local-tiny.yaml", "--set", f"run.output_root={root}", *idle)
    assert again.returncode == 2 and "already exists" in again.stderr

    assert cli("stop", str(run_dir)).returncode == 0
    _wait_for(lambda: json.loads(cli("status", str(run_dir), "--json").stdout)["job"]["state"] == "ended")
    ended = json.loads(cli("status", str(run_dir), "--json").stdout)["job"]
    assert ended["reason"] == "stopped"
    pid = int(launched["job_id"].removeprefix("local-"))
    _wait_for(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z")


def test_local_loop_refuses_missing_inputs_before_creating_the_run(cli, tmp_path: Path, tiny_model_dir: Path) -> None:
    root = tmp_path / "runs"
    missing_model = cli("launch", "configs/local-tiny.yaml", "--set", f"run.output_root={root}",
                        "--set", f"model.path={tmp_path / 'nope'}")
    assert missing_model.returncode == 2 and "model.path" in missing_model.stderr
    missing_tasks = cli("launch", "configs/local-tiny.yaml", "--set", f"run.output_root={root}",
                        "--set", f"model.path={tiny_model_dir}", "--set", "rollout.tasks=nope.jsonl")
    assert missing_tasks.returncode == 2 and "rollout.tasks" in missing_tasks.stderr
    growing = cli("launch", "configs/local-tiny.yaml", "--set", f"run.output_root={root}",
                  "--set", "scheduler.grow_running_step=true")
    assert growing.returncode == 2 and "grow_running_step" in growing.stderr
    assert "Traceback" not in missing_model.stderr + missing_tasks.stderr + growing.stderr
    assert not root.exists() or not any(root.iterdir())


def test_status_timeline_draws_a_real_runs_journal(cli, tmp_path: Path) -> None:
    from gyrectl.config import dump_config, load_config
    from gyrectl.coordinator.events import Dispatched, PhaseChanged, TrainEnded, TrainStarted
    from gyrectl.coordinator.journal import Journal, read_events
    from gyrectl.coordinator.state import Phase, initial_state, limits_from_config
    from gyrectl.coordinator.timeline import role_segments
    from gyrectl.run.rundir import RunDir

    run = RunDir.create(tmp_path, "r")
    config = load_config("configs/local-tiny.yaml")
    run.config_file.write_text(dump_config(config))
    empty = cli("status", str(run.path), "--timeline", str(tmp_path / "none.png"))
    assert empty.returncode == 2 and "no coordinator event" in empty.stderr

    t0 = 1_796_000_000.0  # wall-clock times, as a real head journals them
    with Journal(run.journal_file) as journal:
        for event in (PhaseChanged(cell=0, phase=Phase.STARTING, at=t0),
                      PhaseChanged(cell=1, phase=Phase.STARTING, at=t0),
                      PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=t0 + 30),
                      PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=t0 + 31),
                      Dispatched(count=32, version=0, at=t0 + 31),
                      PhaseChanged(cell=1, phase=Phase.DRAINING, at=t0 + 90),
                      PhaseChanged(cell=1, phase=Phase.TRAIN, at=t0 + 91),
                      TrainStarted(index=0, cells=(1,), take=(), at=t0 + 91, step_ids=("s",)),
                      TrainEnded(index=0, at=t0 + 120)):
            journal.append(event)
    segments = role_segments(initial_state(limits_from_config(config)), read_events(run.journal_file), t0)
    assert (1, "training", 91.0, 120.0) in segments and (0, "rollout", 30.0, 120.0) in segments
    assert min(start for _, _, start, _ in segments) == 0.0

    # an evaluation is drawn as a labelled line; a line that is no evaluation's summary is left out
    run.evals_file.write_text(json.dumps({"step": 0, "weight_version": 1, "tasks": 2, "executions": 4,
                                          "reward_mean": 0.5, "pass_at_1": 0.25, "pass_at_k": 0.5, "k": 2,
                                          "at": t0 + 110}) + "\n"
                              + json.dumps({"weight_version": "garbled"}) + "\n")
    png = tmp_path / "roles.png"
    drawn = cli("status", str(run.path), "--timeline", str(png))
    assert drawn.returncode == 0, drawn.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "timeline written" in drawn.stderr
