"""Evaluation's pure parts: when one is due, its executions, and pass@1 / pass@k."""

from __future__ import annotations

from gyrectl.rollout.evals import EvalPlan, eval_version, summary

PLAN = EvalPlan(tasks=({"id": "a"}, {"id": "b"}), every_steps=2, executions_per_task=3, pass_threshold=1.0)


def test_every_nth_version_is_due_and_never_the_initial_weights():
    assert [v for v in range(7) if PLAN.due(v)] == [2, 4, 6]
    assert not EvalPlan(tasks=(), every_steps=0, executions_per_task=1, pass_threshold=1.0).due(4)


def test_each_task_runs_k_times_under_ids_that_name_the_version():
    assignments = PLAN.assignments(4)
    assert [(a.execution, a.task["id"]) for a in assignments] == [
        ("eval-v4-0000", "a"), ("eval-v4-0001", "a"), ("eval-v4-0002", "a"),
        ("eval-v4-0003", "b"), ("eval-v4-0004", "b"), ("eval-v4-0005", "b")]
    assert [eval_version(a.execution) for a in assignments] == [4] * 6
    assert eval_version("e000012") is None


def test_pass_at_1_averages_each_tasks_share_and_pass_at_k_counts_tasks_with_any_pass():
    records = [{"task": "a", "reward": 1.0}, {"task": "a", "reward": 0.0}, {"task": "a", "reward": 1.0},
               {"task": "b", "reward": 0.0}, {"task": "b", "reward": None}, {"task": "b", "reward": 0.5}]
    line = summary(records, version=4, k=3, pass_threshold=1.0)
    assert line == {"step": 3, "weight_version": 4, "tasks": 2, "executions": 6, "reward_mean": 0.5,
                    "pass_at_1": round((2 / 3 + 0) / 2, 6), "pass_at_k": 0.5, "k": 3}
    assert summary(records, version=4, k=3, pass_threshold=0.5)["pass_at_k"] == 1.0
