"""``gyrectl simulate`` as a command: the --json contract, the timeline file, user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gyrectl.cli.app import app, main

REPO = Path(__file__).resolve().parents[2]
CONTRACT = {"policy", "makespan_s", "executions_trained", "throughput_per_hour", "gpu_idle_fraction", "lower_bound_s",
            "switches"}


def test_simulate_json_prints_one_object_with_the_contract(tmp_path):
    png = tmp_path / "roles.png"
    result = CliRunner().invoke(app, ["simulate", str(REPO / "configs/sim-32nodes.yaml"), "--workload", "short-tail",
                                      "--policy", "colocate", "--set", "run.steps=2", "--json", "--timeline", str(png)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert CONTRACT <= data.keys() and data["policy"] == "colocate" and data["executions_trained"] == 2 * 256
    assert data["makespan_s"] >= data["lower_bound_s"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_replays_a_workload_file(tmp_path):
    jobs = tmp_path / "run.jsonl"
    jobs.write_text("".join(json.dumps({"duration_s": d, "tokens": 1000, "task": "t"}) + "\n" for d in (30, 60, 900)))
    result = CliRunner().invoke(app, ["simulate", str(REPO / "configs/sim-32nodes.yaml"), "--workload", str(jobs),
                                      "--set", "run.steps=1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["executions_trained"] == 256


def test_unknown_workload_exits_2_with_a_message(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", str(REPO / "configs/sim-32nodes.yaml"), "--workload", "nope"])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert "preset" in stderr and "Traceback" not in stderr
