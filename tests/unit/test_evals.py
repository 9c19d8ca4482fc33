"""Evaluation's pure parts: when one is due, its executions, pass@1 / pass@k over the tasks that
ran, and the coordinator's rules around it (the run ends on its final weights' evaluation)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gyrectl.config import load_config
from gyrectl.coordinator.actions import MoveCell, SyncWeights
from gyrectl.coordinator.events import EvalEnded, apply
from gyrectl.coordinator.state import CellState, CellTable, Limits, Phase, initial_state, limits_from_config
from gyrectl.rollout.evals import EvalPlan, eval_version, summary
from gyrectl.scheduler import async_split, colocate, elastic

REPO = Path(__file__).resolve().parents[2]
PLAN = EvalPlan(tasks=({"id": "a"}, {"id": "b"}), every_steps=2, executions_per_task=3, pass_threshold=1.0)


def test_every_nth_version_is_due_and_the_initial_weights_only_when_asked():
    assert [v for v in range(7) if PLAN.due(v)] == [2, 4, 6]
    assert not EvalPlan(tasks=(), every_steps=0, executions_per_task=1, pass_threshold=1.0).due(4)
    ends = dataclasses.replace(PLAN, every_steps=4, at_start=True, final_version=7)
    assert [v for v in range(8) if ends.due(v)] == [0, 4, 7]  # 7 is no multiple of 4: due as the last
    assert [v for v in range(8) if dataclasses.replace(ends, every_steps=0).due(v)] == [0, 7]


def test_each_task_runs_k_times_under_ids_that_name_the_version():
    assignments = PLAN.assignments(4)
    assert [(a.execution, a.task["id"]) for a in assignments] == [
        ("eval-v4-0000", "a"), ("eval-v4-0001", "a"), ("eval-v4-0002", "a"),
        ("eval-v4-0003", "b"), ("eval-v4-0004", "b"), ("eval-v4-0005", "b")]
    assert [eval_version(a.execution) for a in assignments] == [4] * 6
    assert [eval_version(a.execution) for a in PLAN.assignments(0)][:1] == [0]
    assert eval_version("e000012") is None


def test_pass_at_1_averages_each_tasks_share_and_pass_at_k_counts_tasks_with_any_pass():
    records = [{"task": "a", "reward": 1.0}, {"task": "a", "reward": 0.0}, {"task": "a", "reward": 1.0},
               {"task": "b", "reward": 0.0}, {"task": "b", "reward": 0.5}, {"task": "b", "reward": 0.5}]
    line = summary(records, version=4, k=3, pass_threshold=1.0)
    assert line == {"step": 3, "weight_version": 4, "tasks": 2, "executions": 6, "infra_failures": 0,
                    "reward_mean": 0.5, "pass_at_1": round((2 / 3 + 0) / 2, 6), "pass_at_k": 0.5, "k": 3}
    assert summary(records, version=4, k=3, pass_threshold=0.5)["pass_at_k"] == 1.0


def test_infrastructure_failures_are_counted_apart_and_their_tasks_left_out_of_pass_at_k():
    """The issue's case: two tasks, two executions each, one of task b's never ran. Task a
    passed once of twice; b is no evidence either way."""
    records = [{"task": "a", "reward": 1.0}, {"task": "a", "reward": 0.0},
               {"task": "b", "reward": None}, {"task": "b", "reward": 1.0}]
    line = summary(records, version=0, k=2, pass_threshold=1.0)
    assert line == {"step": -1, "weight_version": 0, "tasks": 2, "executions": 4, "infra_failures": 1,
                    "reward_mean": round(2 / 3, 6), "pass_at_1": 0.5, "pass_at_k": 1.0, "k": 2}
    never_ran = summary([{"task": "a", "reward": None}] * 2, version=2, k=2, pass_threshold=1.0)
    assert (never_ran["infra_failures"], never_ran["reward_mean"], never_ran["pass_at_1"],
            never_ran["pass_at_k"]) == (2, None, None, None)


# -- the coordinator around evaluations ------------------------------------------------------------
LIMITS = Limits(num_cells=4, slots_per_cell=10, batch_executions=20, max_staleness=1, total_executions=200,
                eval_final=True)


def _after_last_step(phases: tuple[Phase, ...]):
    """Step 9 of 10 just ended: v10 is published, every execution trained, no cell serves it yet."""
    state = initial_state(LIMITS)
    cells = CellTable(CellState(id=i, phase=p, weight_version=9 if p is Phase.ROLLOUT else 0)
                      for i, p in enumerate(phases))
    return dataclasses.replace(state, cells=cells, dispatched=200, finished=200, trained=200, version=10,
                               evaluated=8)


def test_the_run_ends_only_once_its_final_weights_were_evaluated():
    state = _after_last_step((Phase.ROLLOUT,) * 3 + (Phase.TRAIN,))
    assert not state.done
    assert not apply(state, EvalEnded(version=8, at=1.0)).done  # an older evaluation reported again
    assert apply(state, EvalEnded(version=10, at=1.0)).done
    assert dataclasses.replace(state, limits=dataclasses.replace(LIMITS, eval_final=False)).done


def test_every_policy_serves_the_final_weights_after_the_last_step():
    """What the final evaluation needs: a server on v10 (serving cells reload it, or the cells
    that trained return and load it), so the run cannot wait for it forever."""
    split = (Phase.ROLLOUT,) * 3 + (Phase.TRAIN,)
    syncs = [SyncWeights(cell=c, version=10) for c in range(3)]
    assert set(syncs + [MoveCell(cell=3, to=Phase.ROLLOUT)]) <= set(elastic.decide(_after_last_step(split), 0.0))
    assert set(syncs) <= set(async_split.decide(_after_last_step(split), 0.0))
    assert colocate.decide(_after_last_step((Phase.TRAIN,) * 4), 0.0) == [
        MoveCell(cell=c, to=Phase.ROLLOUT) for c in range(4)]


def test_a_blocking_evaluation_of_the_starting_weights_holds_the_first_step():
    """With eval.at_start and eval.blocking, step 0 waits for EvalEnded(0); ``evaluated`` -1 is
    "no evaluation ended yet", which v0's evaluation ending changes."""
    state = dataclasses.replace(initial_state(dataclasses.replace(LIMITS, eval_blocks_start=True)), evaluated=-1)
    assert state.awaiting_eval
    assert not apply(state, EvalEnded(version=0, at=1.0)).awaiting_eval
    assert not dataclasses.replace(state, limits=LIMITS).awaiting_eval  # not blocking


def test_the_embedded_default_evaluates_its_start_and_end_and_the_run_waits_for_the_end():
    config = load_config(REPO / "configs/local-tiny.yaml")
    limits = limits_from_config(config)
    assert config.eval.evaluates and config.eval.at_start and config.eval.at_end
    assert (limits.eval_final, limits.eval_blocks_start, limits.eval_blocks_every) == (True, False, 0)
    no_end = load_config(REPO / "configs/local-tiny.yaml", ["eval.at_end=false"])
    assert no_end.eval.evaluates and not limits_from_config(no_end).eval_final
    none = load_config(REPO / "configs/local-tiny.yaml", ["eval.tasks=", "eval.every_steps=0"])
    assert not none.eval.evaluates and not limits_from_config(none).eval_final  # no tasks: nothing to wait for
