"""The learning benchmark's arithmetic (benchmarks/learning/curve.py): pass@1 per task over the
tasks that ran in full, and a paired bootstrap interval that contains the true difference."""

from __future__ import annotations

import pytest

from benchmarks.learning.curve import compare, rollout_rewards, task_pass_rates


def _records(version: int, outcomes: dict[str, list[float | None]]) -> list[dict]:
    return [{"eval": version, "task": task, "reward": r} for task, rs in outcomes.items() for r in rs]


def test_pass_rates_leave_out_a_task_with_an_infrastructure_failure():
    rates = task_pass_rates(_records(0, {"a": [1.0, 0.0], "b": [None, 1.0], "c": [0.2, 0.6]}), threshold=0.5)
    assert rates == {0: {"a": 0.5, "c": 0.5}}


def test_a_clear_gain_has_an_interval_above_zero_and_no_change_one_around_it():
    before = {f"t{i}": [float(i % 4 == 0)] for i in range(80)}  # 25 %
    after = {f"t{i}": [float(i % 4 != 3)] for i in range(80)}  # 75 %, every task passing before still passes
    rates = task_pass_rates(_records(0, before) + _records(6, after), threshold=0.5)
    gain = compare(rates, first=0, last=6)
    assert (gain.tasks, gain.pass_at_1_first, gain.pass_at_1_last) == (80, 0.25, 0.75)
    assert gain.difference == pytest.approx(0.5) and 0 < gain.interval[0] < 0.5 < gain.interval[1]
    same = compare(task_pass_rates(_records(0, before) + _records(6, before), threshold=0.5), first=0, last=6)
    assert same.interval == (0.0, 0.0)
    shuffled = {f"t{i}": [float(i % 4 == 1)] for i in range(80)}  # 25 % again, other tasks
    noise = compare(task_pass_rates(_records(0, before) + _records(6, shuffled), threshold=0.5), first=0, last=6)
    assert noise.interval[0] < 0 < noise.interval[1]


def test_rollout_rewards_count_every_execution_that_ran_by_the_weights_that_sampled_it():
    records = [{"status": "ok", "weight_version": v, "reward": r} for v, r in [(0, 0.0), (3, 1.0), (10, 1.0)]]
    records.append({"status": "infra_failure", "weight_version": 10, "reward": None})
    assert rollout_rewards(records, bucket=10) == [{"versions": "v0-v9", "executions": 2, "reward_mean": 0.5},
                                                   {"versions": "v10-v19", "executions": 1, "reward_mean": 1.0}]
