"""``gyrectl simulate --calibrate``: the measurement inverts the simulator's model (a simulated
run's journal gives back the values it was simulated with), damaged lines are skipped and said,
and the command's two outputs (YAML to paste, ``--json`` of the ``simulator.*`` fields)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from gyrectl.cli.app import app, main
from gyrectl.config import dump_config, load_config, parse_config
from gyrectl.config.schema import SimulatorConfig
from gyrectl.coordinator.journal import Journal, read_journal
from gyrectl.coordinator.loop import run_coordinator
from gyrectl.coordinator.state import initial_state
from gyrectl.scheduler import POLICIES
from gyrectl.sim.calibrate import _slope, calibrate
from gyrectl.sim.run import EventLog, simulated_actuator, simulated_limits, simulated_world
from gyrectl.sim.workload import load_workload

REPO = Path(__file__).resolve().parents[2]
SHAPE = ["run.steps=6", "cluster.nodes=24", "training.batch_executions=64"]
TRUE = {"train_tokens_per_s_per_gpu": 137.0, "train_step_overhead_s": 11.5, "rollout_to_train_s": 6.25,
        "train_to_rollout_s": 7.75, "engine_start_s": 42.0, "weight_sync_s": 2.5, "step_restart_s": 1.75}
"""Distinctive values, none a default (a wake longer than a reload: the reload does not hide it)."""
LOAD_S = 3.0
"""The trainer's load time its simulated metrics lines report (not part of the fitted time)."""


def simulated_run(folder: Path, policy: str, *, trainer_times: bool) -> dict[int, int]:
    """A run directory as a real run leaves it, from a simulation with :data:`TRUE`: its journal,
    its config (the default ``simulator:`` section, as a real run's) and ``metrics.jsonl`` (the
    simulator has no trainer: its lines carry each step's trained tokens and, with
    ``trainer_times``, the time a trainer reports, the model's work and overhead after its load)."""
    shape = SHAPE + [f"scheduler.policy={policy}"]
    config = load_config(REPO / "configs/sim-32nodes.yaml", shape + [f"simulator.{k}={v}" for k, v in TRUE.items()])
    limits = simulated_limits(config)
    workload = load_workload("heavy-tail", size=limits.total_executions, seed=1,
                             time_limit_s=config.rollout.execution_time_limit_s)
    world = simulated_world(config, workload)
    folder.mkdir(parents=True)
    log = EventLog(journal=Journal(folder / "journal.jsonl", fsync=False))
    try:
        run_coordinator(state=initial_state(limits), decide=POLICIES[policy],
                        actuator=simulated_actuator(config, world), journal=log, now=world.clock.now)
    finally:
        log.journal.close()
    (folder / "config.yaml").write_text(dump_config(load_config(REPO / "configs/sim-32nodes.yaml", shape)))
    gpus = config.cells.nodes_per_cell * config.cluster.gpus_per_node
    cells = {e.index: len(e.cells) for e in log.events if type(e).__name__ == "TrainStarted"}
    with (folder / "metrics.jsonl").open("w") as out:
        for step, tokens in world.batches.step_tokens.items():
            line = {"step": step, "unique_tokens": tokens}
            if trainer_times:
                work = tokens / (TRUE["train_tokens_per_s_per_gpu"] * gpus * cells[step])
                line |= {"duration_s": LOAD_S + work + TRUE["train_step_overhead_s"], "time_s": {"load": LOAD_S}}
            out.write(json.dumps(line) + "\n")
    return world.batches.step_tokens


def calibrated(folder: Path):
    return calibrate(events=read_journal(folder / "journal.jsonl").events,
                     metrics=[json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()],
                     config=load_config(folder / "config.yaml"))


@pytest.mark.parametrize("policy", ["colocate", "async"])
def test_calibration_recovers_the_values_a_run_was_simulated_with(tmp_path, policy):
    simulated_run(tmp_path / "run", policy, trainer_times=True)
    measured = calibrated(tmp_path / "run")
    values = measured.as_dict()
    expected = dict(TRUE)
    if policy == "async":  # its training cells never serve: no returns; colocate never trains twice running
        expected.pop("train_to_rollout_s")
    else:
        expected.pop("step_restart_s")
    for name, value in expected.items():
        assert values[name] == pytest.approx(value, rel=1e-3), name
    counts = {m.name: m.samples for m in measured.values}
    assert all(counts[name] > 0 for name in expected)
    defaults = SimulatorConfig()
    for name in ("server_slowdown_at_full", "move_cost_s", "executions_movable", "workload_size"):
        assert counts[name] == 0 and values[name] == getattr(defaults, name)  # kept and flagged


def test_a_grown_step_is_fitted_too_and_without_trainer_times_the_step_start_absorbs_the_overhead(tmp_path):
    simulated_run(tmp_path / "run", "elastic", trainer_times=False)  # its steps grow (TrainExtended)
    measured = calibrated(tmp_path / "run")
    values = measured.as_dict()
    assert values["train_tokens_per_s_per_gpu"] == pytest.approx(TRUE["train_tokens_per_s_per_gpu"], rel=1e-3)
    overhead = next(m for m in measured.values if m.name == "train_step_overhead_s")
    assert overhead.samples == 0 and "not measured" in overhead.note
    # The journal holds start + overhead: their sum is what the simulator needs to time a step again.
    assert values["rollout_to_train_s"] + values["train_step_overhead_s"] == pytest.approx(
        TRUE["rollout_to_train_s"] + TRUE["train_step_overhead_s"], rel=1e-3)


def test_one_step_size_keeps_the_configs_throughput_and_flags_it(tmp_path):
    steps = simulated_run(tmp_path / "run", "colocate", trainer_times=False)
    same = [json.dumps({"step": step, "unique_tokens": 5000}) for step in steps]
    (tmp_path / "run" / "metrics.jsonl").write_text("\n".join(same) + "\n")
    tokens = next(m for m in calibrated(tmp_path / "run").values if m.name == "train_tokens_per_s_per_gpu")
    assert tokens.samples == 0 and tokens.value == SimulatorConfig().train_tokens_per_s_per_gpu
    assert "one step size only" in tokens.note


def test_calibrate_json_is_exactly_the_simulator_fields_and_the_yaml_loads_as_a_config(tmp_path):
    simulated_run(tmp_path / "run", "colocate", trainer_times=True)
    result = CliRunner().invoke(app, ["simulate", "--calibrate", str(tmp_path / "run"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {f.name for f in dataclasses.fields(SimulatorConfig)}
    assert data["engine_start_s"] == pytest.approx(TRUE["engine_start_s"])
    assert all(isinstance(v, int | float) for v in data.values())

    text = CliRunner().invoke(app, ["simulate", "--calibrate", str(tmp_path / "run")])
    assert text.exit_code == 0, text.output
    assert "# measured from" in text.stdout and "# not measured" in text.stdout
    section = yaml.safe_load(text.stdout)
    assert section["simulator"] == data
    raw = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text()) | section
    assert dataclasses.asdict(parse_config(raw).simulator) == data
    pasted = tmp_path / "pasted.yaml"  # the section pasted into a config: the simulator runs on it
    pasted.write_text((tmp_path / "run" / "config.yaml").read_text().split("simulator:")[0] + text.stdout)
    assert load_config(pasted).simulator.engine_start_s == pytest.approx(TRUE["engine_start_s"])


def test_damaged_journal_lines_are_skipped_and_reported(tmp_path, capsys):
    simulated_run(tmp_path / "run", "colocate", trainer_times=True)
    journal = tmp_path / "run" / "journal.jsonl"
    lines = journal.read_text().splitlines()
    lines.insert(5, '{"event": "PhaseChanged", "cell": ')
    lines.insert(9, "garbage \x00 line")
    journal.write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--calibrate", str(tmp_path / "run"), "--json"])
    assert exit_info.value.code == 0
    captured = capsys.readouterr()
    assert "skipped 2 unreadable span(s)" in captured.err and "journal.jsonl:6" in captured.err
    assert json.loads(captured.out)["weight_sync_s"] == pytest.approx(TRUE["weight_sync_s"])


@pytest.mark.parametrize("case", ["not a directory", "no journal", "empty journal"])
def test_calibrate_on_what_is_not_a_run_exits_2_with_a_message(tmp_path, capsys, case):
    target = tmp_path / "run"
    if case == "not a directory":
        target.write_text("x")
    else:
        target.mkdir()
        (target / "config.yaml").write_text(dump_config(load_config(REPO / "configs/sim-32nodes.yaml")))
        if case == "empty journal":
            (target / "journal.jsonl").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--calibrate", str(target)])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr and str(target) in stderr.replace("\n", "")


def test_simulate_without_config_or_calibrate_is_a_usage_error_naming_config(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--workload", "short-tail"])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert "CONFIG" in stderr and "Traceback" not in stderr


def test_a_fit_over_steps_of_nearly_one_size_is_not_trusted():
    """A real run's steps train nearly the same tokens, so their wall times' noise would set the slope
    (the first local e2e run: 16-18.5k tokens, 2-12 s): the trainer's own rate is used instead."""
    starts = np.ones((4, 1))
    noisy = _slope(np.array([15989.0, 16305.0, 18466.0, 18193.0]), starts, np.array([7.0, 2.0, 12.0, 3.0]))
    exact = _slope(np.array([1000.0, 2000.0, 3000.0, 5000.0]), starts, np.array([3.0, 4.0, 5.0, 7.0]))
    assert noisy < 0 and exact == pytest.approx(1e-3)
