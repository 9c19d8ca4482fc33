"""A step's learning signal is visible: groups, groups without signal (reward std 0) and the share of
trained tokens with a non-zero advantage, in ``metrics.jsonl`` (the trainer's), ``status`` (a
warning on a step that trained nothing) and TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gyrectl.config import dump_config, load_config
from gyrectl.run.rundir import RunDir
from gyrectl.tracking.scalars import step_scalars
from gyrectl.train.grpo import group_advantages
from gyrectl.train.signal import batch_signal

STEP = {"step": 0, "reward_mean": 0.5, "executions": 8, "naive_tokens": 100, "trained_tokens": 40,
        "weight_version": 1, "duration_s": 2.5}


def test_a_group_with_one_reward_or_one_member_has_no_signal():
    rewards = {"a0": 1.0, "a1": 0.0, "b0": 1.0, "b1": 1.0, "c0": 0.0}
    groups = {"a0": "a", "a1": "a", "b0": "b", "b1": "b", "c0": "c"}
    signal = batch_signal(advantages=group_advantages(rewards=rewards, groups=groups), groups=groups,
                          trained_tokens={"a0": 10, "a1": 30, "b0": 20, "b1": 20, "c0": 20})
    assert (signal.groups, signal.groups_without_signal, signal.signal_tokens) == (3, 2, 40)
    assert signal.token_share == pytest.approx(0.4)
    empty = batch_signal(advantages={}, groups={}, trained_tokens={})
    assert (empty.groups, empty.token_share) == (0, 0.0)


def _run(tmp_path: Path, lines: list[dict]) -> RunDir:
    run = RunDir.create(tmp_path, "signal")
    run.config_file.write_text(dump_config(load_config("configs/local-tiny.yaml")))
    run.metrics_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run


def test_status_warns_of_a_step_whose_groups_were_all_uniform(cli, tmp_path: Path) -> None:
    run = _run(tmp_path, [{**STEP, "groups": 4, "groups_without_signal": 1, "signal_token_share": 0.7},
                          {**STEP, "step": 1, "weight_version": 2, "groups": 4, "groups_without_signal": 4,
                           "signal_token_share": 0.0},
                          {**STEP, "step": 2, "weight_version": 3}])  # an older trainer's line
    text = cli("status", str(run.path), env={"COLUMNS": "250"})
    assert text.returncode == 0, text.stderr
    assert "4 (1)" in text.stdout and "4 (4) all uniform" in text.stdout
    assert "warning: step 1 trained nothing: every group's executions got the same reward" in text.stdout
    steps = json.loads(cli("status", str(run.path), "--json").stdout)["steps"]
    assert [(s.get("groups"), s.get("groups_without_signal"), s.get("signal_token_share")) for s in steps] == [
        (4, 1, 0.7), (4, 4, 0.0), (None, None, None)]


def test_a_step_with_signal_everywhere_draws_no_warning(cli, tmp_path: Path) -> None:
    run = _run(tmp_path, [{**STEP, "groups": 4, "groups_without_signal": 0, "signal_token_share": 1.0}])
    assert "trained nothing" not in cli("status", str(run.path), env={"COLUMNS": "250"}).stdout


def test_tensorboard_gets_the_signal_of_each_step() -> None:
    scalars = step_scalars([{**STEP, "groups": 4, "groups_without_signal": 3, "signal_token_share": 0.25}], {})
    assert {(s.tag, s.value) for s in scalars} >= {
        ("train/groups", 4.0), ("train/groups_without_signal", 3.0), ("train/signal_token_share", 0.25)}
