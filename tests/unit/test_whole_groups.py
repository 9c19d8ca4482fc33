"""A training batch is whole GRPO groups: a group enters the buffer when its last member ends, at its
oldest member's weights version, on the coordinator's fold, the head's batch claims and the
simulator alike."""

from __future__ import annotations

import json

import pytest

from gyrectl.config import load_config
from gyrectl.coordinator.actions import Dispatch
from gyrectl.coordinator.events import Dispatched, Finished, PhaseChanged, apply
from gyrectl.coordinator.state import CoordinatorState, Limits, Phase, initial_state, limits_from_config
from gyrectl.errors import ConfigError
from gyrectl.rollout.claims import BatchClaims
from gyrectl.rollout.records import ExecutionRecord
from gyrectl.run.rundir import RunDir
from gyrectl.scheduler.common import dispatch, next_batch
from gyrectl.sim.batches import SimulatedBatches
from gyrectl.store.jsonl import JsonlAppender
from gyrectl.train.grpo import group_advantages

LIMITS = Limits(num_cells=2, slots_per_cell=8, batch_executions=8, max_staleness=1, group_size=4, total_executions=16)
ORDER = [(1, 0), (0, 0), (5, 1), (2, 0), (4, 1), (6, 1), (3, 1), (7, 1)]
"""(seq, version) in the order they end: group 0 (seqs 0-3) ends with seq 3, dispatched at v1."""


def _ended(order: list[tuple[int, int]]) -> list[CoordinatorState]:
    state = apply(apply(initial_state(LIMITS), Dispatched(count=4, version=0, at=0.0)),
                  Dispatched(count=4, version=1, at=0.0))
    states = []
    for seq, version in order:
        state = apply(state, Finished(seq=seq, version=version, timed_out=False, at=1.0))
        states.append(state)
    return states


def test_a_group_enters_the_buffer_when_its_last_member_ends_at_its_oldest_members_version():
    states = _ended(ORDER)
    assert [s.buffered for s in states] == [0, 0, 0, 0, 0, 0, 4, 8]
    opened = states[5].open_groups.as_dict()
    assert {n: (g.ended, g.oldest_version) for n, g in opened.items()} == {0: (3, 0), 1: (3, 1)}
    assert states[6].buffer == ((0, 0, 4),)  # group 0: its oldest member was dispatched with v0
    assert states[7].buffer == ((0, 0, 4), (0, 1, 4)) and not states[7].open_groups
    assert [s.finished for s in states] == list(range(1, 9))  # in-flight work still counts each execution


def test_no_batch_is_ready_while_a_group_misses_a_member():
    limits = Limits(num_cells=2, slots_per_cell=8, batch_executions=4, max_staleness=1, group_size=4,
                    total_executions=8)
    state = apply(initial_state(limits), Dispatched(count=8, version=0, at=0.0))
    for seq in (0, 1, 2, 4, 5, 6):  # six ended: more than a batch, but no group is whole
        state = apply(state, Finished(seq=seq, version=0, timed_out=False, at=1.0))
    assert next_batch(state) is None
    state = apply(state, Finished(seq=7, version=0, timed_out=True, at=2.0))  # a time-out ends its group too
    assert next_batch(state) == ((1, 0, 4),)


def _record(seq: int, version: int, *, reward: float | None = 1.0) -> ExecutionRecord:
    return ExecutionRecord(execution=f"e{seq:06d}", task="t0", reward=reward,
                           status="ok" if reward is not None else "infra_failure", error="", exit_code=0,
                           started_at=0.0, ended_at=1.0, host="", seq=seq, weight_version=version)


def test_batch_claims_write_whole_groups_numbered_apart_even_for_one_task(tmp_path):
    run = RunDir.create(tmp_path, "r")
    with JsonlAppender(run.executions_file) as log:
        claims = BatchClaims(run=run, batch_executions=8, group_size=4, log=log)
        claims.add(_record(seq, version, reward=None if seq == 6 else seq % 2) for seq, version in ORDER)
        assert claims.claim(index=0, take=((0, 1, 4),)) == 1  # the infrastructure failure is left out
    batch = json.loads(run.batch_file(0).read_text())
    assert [e["execution"] for e in batch["executions"]] == ["e000004", "e000005", "e000007"]
    assert {e["group"] for e in batch["executions"]} == {1} and batch["left_out"] == ["e000006"]


def test_a_group_trains_on_the_members_that_ran_and_two_groups_of_one_task_keep_their_baselines():
    rewards = {"a0": 1.0, "a1": 0.0, "b0": 1.0, "b1": 1.0}
    same_task = group_advantages(rewards=rewards, groups={"a0": "t", "a1": "t", "b0": "t", "b1": "t"})
    by_group = group_advantages(rewards=rewards, groups={"a0": "g0", "a1": "g0", "b0": "g1", "b1": "g1"})
    assert by_group["b0"] == by_group["b1"] == 0.0  # group 1 is uniform: no signal
    assert same_task["b0"] > 0  # merged with group 0, its members would have been pushed up


def test_the_simulator_claims_the_same_groups():
    batches = SimulatedBatches(batch_executions=8, group_size=4)
    for seq, version in ORDER[:6]:
        batches.finished(seq=seq, version=version, tokens=10)
    batches.finished(seq=3, version=1, tokens=10)
    assert batches.claim(index=0, take=((0, 0, 4),)) == 0 and batches.step_tokens[0] == 40


SKIPPING = Limits(num_cells=2, slots_per_cell=16, batch_executions=4, max_staleness=0, group_size=2,
                  total_executions=8, uniform_skips_per_step=4)  # training.max_batch_draws=2


def _finish(state: CoordinatorState, rewards: dict[int, float | None]) -> CoordinatorState:
    for seq, reward in rewards.items():
        state = apply(state, Finished(seq=seq, version=0, timed_out=False, at=1.0, reward=reward,
                                      infra_failure=reward is None))
    return state


def test_groups_without_signal_are_kept_out_and_made_up_for_within_the_draws():
    serving = apply(initial_state(SKIPPING), PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=0.0))
    assert dispatch(serving, slots=16, max_staleness=0) == [Dispatch(count=4, version=0)]  # block 0
    state = apply(serving, Dispatched(count=4, version=0, at=0.0))
    assert dispatch(state, slots=16, max_staleness=0) == []  # no more at v0
    state = _finish(state, {0: 1.0, 1: 1.0, 2: 0.0, 3: None})  # uniform; one that ran (no baseline)
    assert (state.buffered, state.skipped_uniform, state.finished) == (0, 4, 4)
    assert dispatch(state, slots=16, max_staleness=0) == [Dispatch(count=4, version=0)]  # made up for
    state = _finish(apply(state, Dispatched(count=4, version=0, at=2.0)), {4: 0.0, 5: 0.0, 6: 1.0, 7: 0.0})
    # The draws are spent (4 of 4 for the first step): the uniform group is kept this time
    assert (state.buffered, state.skipped_uniform) == (4, 4)
    assert next_batch(state) == ((1, 0, 4),)


def test_claims_take_the_groups_with_a_signal_first(tmp_path):
    run = RunDir.create(tmp_path, "r")
    with JsonlAppender(run.executions_file) as log:
        claims = BatchClaims(run=run, batch_executions=8, group_size=2, log=log)
        claims.add(_record(seq, 0, reward=r) for seq, r in enumerate([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 1.0, 0.0]))
        claims.claim(index=0, take=((0, 0, 4),))
    assert [e["execution"] for e in json.loads(run.batch_file(0).read_text())["executions"]] == [
        "e000002", "e000003", "e000006", "e000007"]


def test_skipping_needs_completion_order_and_a_draw_at_least():
    with pytest.raises(ConfigError, match="training.skip_uniform_groups: needs scheduler.batch_order=completion"):
        load_config("configs/local-tiny.yaml", ["training.skip_uniform_groups=true", "scheduler.batch_order=dispatch"])
    with pytest.raises(ConfigError, match="training.max_batch_draws"):
        load_config("configs/local-tiny.yaml", ["training.max_batch_draws=0"])
    limits = limits_from_config(load_config("configs/local-tiny.yaml", ["training.skip_uniform_groups=true"]))
    assert limits.uniform_skips_per_step == 32 * 3
