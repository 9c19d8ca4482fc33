"""Executions as real processes through the coordinator's rollout port, without a model: the
harness here is a small script, so these run in seconds. Time limits, output parsing, scoring,
infrastructure failures and what a training step claims."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from gyrectl.coordinator.events import EvalEnded, Finished, Started
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.rollout.harnesses import HarnessRunner
from gyrectl.rollout.live import live_rollouts
from gyrectl.rollout.tasks import Assignment, assign
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records

# Prints what its task says, then maybe sleeps past the time limit or crashes silently.
HARNESS = """
import json, os, sys, time
task = json.loads(os.environ["GYRECTL_TASK"])
if task.get("crash"):
    sys.exit(3)
print("log line, not JSON")
print(json.dumps({"answer": task["answer"], "base_url": os.environ["OPENAI_BASE_URL"]}), flush=True)
time.sleep(task.get("sleep", 0))
"""


@pytest.fixture
def harness_file(tmp_path: Path) -> Path:
    path = tmp_path / "harness.py"
    path.write_text(HARNESS)
    return path


def _runner(harness_file: Path, tmp_path: Path, time_limit_s: float = 30.0) -> HarnessRunner:
    return HarnessRunner(command=[sys.executable, str(harness_file)], cwd=tmp_path, env={},
                         time_limit_s=time_limit_s, logs_dir=tmp_path / "logs", kill_grace_s=0.5)


def _reap_all(runner: HarnessRunner, count: int, timeout: float = 30.0) -> list:
    ended, deadline = [], time.monotonic() + timeout
    while len(ended) < count:
        assert time.monotonic() < deadline, f"only {len(ended)} of {count} executions ended"
        ended += runner.reap()
        time.sleep(0.05)
    return ended


def test_a_harness_at_the_time_limit_is_stopped_and_keeps_its_output(harness_file, tmp_path):
    runner = _runner(harness_file, tmp_path, time_limit_s=1.0)
    runner.start(Assignment("e000000", 0, {"id": "t", "answer": "12", "sleep": 60}), base_url="http://gw/x/e000000/v1")
    [ended] = _reap_all(runner, 1)
    assert ended.timed_out and ended.output["answer"] == "12" and ended.ended_at - ended.started_at < 10
    assert ended.output["base_url"] == "http://gw/x/e000000/v1"


def test_tasks_are_assigned_in_groups_by_dispatch_order():
    tasks = [{"id": "a"}, {"id": "b"}]
    assert [assign(seq, tasks, executions_per_task=2).task["id"] for seq in range(6)] == ["a", "a", "b", "b", "a", "a"]
    assert assign(7, tasks, executions_per_task=2).execution == "e000007"


def test_live_rollouts_finish_score_and_claim(harness_file, tmp_path):
    run = RunDir.create(tmp_path / "runs", "r")
    tasks = [{"id": "digits", "answer": "123"}, {"id": "letters", "answer": "abc"}, {"id": "broken", "crash": True}]
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=("tiny",)), sink=None)  # no calls here
    rollouts = live_rollouts(run=run, gateway=gateway, harnesses=_runner(harness_file, tmp_path), tasks=tasks,
                            executions_per_task=2, batch_executions=6,
                            verifier=lambda task, output: sum(c.isdigit() for c in output["answer"]) / 3,
                            servers=[], replicas_of=lambda cell, nodes: (), weight_sync=None)  # type: ignore[arg-type]
    try:
        rollouts.executions.dispatch(count=6, version=0)
        events: list = []
        deadline = time.monotonic() + 60
        while sum(isinstance(e, Finished) for e in events) < 6:
            assert time.monotonic() < deadline
            events += rollouts.executions.poll()
            rollouts.clock.wait()
        assert [e.count for e in events if isinstance(e, Started)] == [6]
        assert sorted(e.seq for e in events if isinstance(e, Finished)) == list(range(6))

        assert rollouts.claims.claim(index=0, take=((0, 0, 6),)) == 2  # left out: the two infra failures
        claimed = json.loads(run.batch_file(0).read_text())
        assert claimed["step"] == 0
        rewards = {e["execution"]: e["reward"] for e in claimed["executions"]}
        assert rewards == {"e000000": 1.0, "e000001": 1.0, "e000002": 0.0, "e000003": 0.0}
        assert claimed["left_out"] == ["e000004", "e000005"]  # crashed without output: infra failures
        lines = list(read_records(run.executions_file))
        statuses = {r["execution"]: r["status"] for r in lines if "status" in r}
        assert statuses["e000004"] == "infra_failure" and statuses["e000000"] == "ok"
        assert sorted(r["execution"] for r in lines if r.get("step") == 0) == [f"e00000{i}" for i in range(6)]

        # A step abandoned (a cell in it was lost) gives its executions back to be claimed again.
        rollouts.claims.release(index=0)
        rollouts.claims.claim(index=0, take=((0, 0, 6),))
        again = json.loads(run.batch_file(0).read_text())
        assert again["executions"] == claimed["executions"] and again["left_out"] == claimed["left_out"]
    finally:
        rollouts.close()
        gateway.close()


def test_harnesses_that_end_while_the_run_stops_are_left_for_the_next_head(harness_file, tmp_path):
    """Slurm signals the whole job when it is cancelled or requeued, harnesses included: one that
    dies then is no infrastructure failure of its own, so it is not recorded as finished (the
    next head runs it again under a new id) -- never an untrained left-out execution."""
    run = RunDir.create(tmp_path / "runs", "r")
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=("tiny",)), sink=None)  # no calls here
    stopping = []
    rollouts = live_rollouts(run=run, gateway=gateway, harnesses=_runner(harness_file, tmp_path),
                            tasks=[{"id": "broken", "crash": True}], executions_per_task=1, batch_executions=1,
                            verifier=lambda task, output: 0.0, servers=[], replicas_of=lambda cell, nodes: (),
                            weight_sync=None,  # type: ignore[arg-type]
                            stopping=lambda: bool(stopping))
    try:
        rollouts.executions.dispatch(count=1, version=0)
        stopping.append(True)
        time.sleep(1.5)  # the harness has crashed by now
        assert not any(isinstance(e, Finished) for e in rollouts.executions.poll())
        assert not any("status" in r for r in read_records(run.executions_file))
    finally:
        rollouts.close()
        gateway.close()


def test_evaluations_run_on_due_weights_are_recorded_apart_and_never_claimed(harness_file, tmp_path):
    """A server starts serving v2 (due with every_steps 2): the eval's executions start, pinned to
    v2 and at the eval's temperature, are scored into their own files, and a training step's
    claim never takes one."""
    from gyrectl.rollout.evals import EvalPlan
    from gyrectl.rollout.replicas import CellServer

    run = RunDir.create(tmp_path / "runs", "r")
    plan = EvalPlan(tasks=({"id": "held-out", "answer": "12", "sleep": 1.0},), every_steps=2, executions_per_task=2,
                    pass_threshold=0.5, temperature=0.0)
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=("tiny",)), sink=None)
    rollouts = live_rollouts(run=run, gateway=gateway, harnesses=_runner(harness_file, tmp_path),
                            tasks=[{"id": "train", "answer": "1"}], executions_per_task=2, batch_executions=2,
                            verifier=lambda task, output: sum(c.isdigit() for c in output["answer"]) / 2,
                            servers=[[CellServer("cell0", "http://127.0.0.1:9")]], replicas_of=lambda cell, nodes: (),
                            weight_sync=None, evals=plan)  # type: ignore[arg-type]
    try:
        rollouts.servers.route(0, routed=True, weight_version=1)  # not due
        rollouts.executions.poll()
        assert not gateway.gateway.sampling
        rollouts.servers.route(0, routed=True, weight_version=2)
        rollouts.executions.dispatch(count=2, version=2)
        rollouts.executions.poll()  # starts the eval
        assert gateway.gateway.sampling == {"eval-v2-0000": {"temperature": 0.0}, "eval-v2-0001": {"temperature": 0.0}}
        events, deadline = [], time.monotonic() + 60
        while sum(isinstance(e, Finished) for e in events) < 2 or not run.evals_file.exists():
            assert time.monotonic() < deadline
            events += rollouts.executions.poll()
            rollouts.clock.wait()
        rollouts.servers.route(0, routed=True, weight_version=2)  # v2 served again: not evaluated twice
        rollouts.executions.poll()
        rollouts.claims.claim(index=0, take=((0, 2, 2),))
        batch = json.loads(run.batch_file(0).read_text())
    finally:
        rollouts.close()
        gateway.close()
    assert [e["execution"] for e in batch["executions"]] == ["e000000", "e000001"]
    assert [e.seq for e in events if isinstance(e, Finished)] == [0, 1]  # evals are no training executions
    assert [e.version for e in events if isinstance(e, EvalEnded)] == [2]  # what a blocked step waits for
    (line,) = read_records(run.evals_file)
    assert {k: line[k] for k in ("step", "weight_version", "tasks", "executions", "infra_failures", "reward_mean",
                                 "pass_at_1", "pass_at_k", "k")} == {
        "step": 1, "weight_version": 2, "tasks": 1, "executions": 2, "infra_failures": 0, "reward_mean": 1.0,
        "pass_at_1": 1.0, "pass_at_k": 1.0, "k": 2}
    assert sorted(r["execution"] for r in read_records(run.eval_executions_file)) == ["eval-v2-0000", "eval-v2-0001"]
    assert not any(r["execution"].startswith("eval") for r in read_records(run.executions_file))
    assert not gateway.gateway.sampling  # forgotten once each ended


def test_a_resumed_head_does_not_evaluate_a_version_again(harness_file, tmp_path):
    """evals.jsonl says v2 was evaluated: serving v2 again after a takeover starts no evaluation,
    and the coordinator hears of it again (the old head may have ended before journaling it)."""
    from gyrectl.rollout.evals import EvalPlan
    from gyrectl.rollout.replicas import CellServer
    from gyrectl.rollout.resume import CarriedOver
    from gyrectl.store.jsonl import JsonlAppender

    run = RunDir.create(tmp_path / "runs", "r")
    with JsonlAppender(run.evals_file) as out:
        out.append({"step": 1, "weight_version": 2, "tasks": 1, "executions": 1, "reward_mean": 1.0,
                    "pass_at_1": 1.0, "pass_at_k": 1.0, "k": 1, "at": 0.0})
    plan = EvalPlan(tasks=({"id": "held-out", "answer": "1"},), every_steps=2, executions_per_task=1,
                    pass_threshold=0.5, temperature=0.0)
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=("tiny",)), sink=None)
    rollouts = live_rollouts(run=run, gateway=gateway, harnesses=_runner(harness_file, tmp_path),
                            tasks=[{"id": "train", "answer": "1"}], executions_per_task=1, batch_executions=1,
                            verifier=lambda task, output: 1.0, servers=[[CellServer("cell0", "http://127.0.0.1:9")]],
                            replicas_of=lambda cell, nodes: (), weight_sync=None, evals=plan)  # type: ignore[arg-type]
    try:
        rollouts.executions.take_over(CarriedOver(finished=[], running=[], next_seq=0), resume=1)
        rollouts.servers.route(0, routed=True, weight_version=2)
        assert [e.version for e in rollouts.executions.poll() if isinstance(e, EvalEnded)] == [2]
        assert not gateway.gateway.sampling  # no eval execution started
        rollouts.servers.route(0, routed=True, weight_version=4)
        rollouts.executions.poll()
        assert list(gateway.gateway.sampling) == ["eval-v4-0000"]
    finally:
        rollouts.close()
        gateway.close()


def test_a_resumed_head_trains_what_timed_out_and_leaves_out_what_failed(harness_file, tmp_path):
    """A timed-out execution is scored and trained like any other, also when another head finished it."""
    from gyrectl.rollout.resume import CarriedOver

    run = RunDir.create(tmp_path / "runs", "r")
    records = [{"execution": f"e00000{seq}", "seq": seq, "task": "t", "reward": reward, "status": status,
                "weight_version": 0} for seq, (status, reward) in enumerate([("ok", 1.0), ("timed_out", 0.0),
                                                                              ("infra_failure", None)])]
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=("tiny",)), sink=None)
    rollouts = live_rollouts(run=run, gateway=gateway, harnesses=_runner(harness_file, tmp_path),
                            tasks=[{"id": "t", "answer": "1"}], executions_per_task=1, batch_executions=3,
                            verifier=lambda task, output: 1.0, servers=[], replicas_of=lambda cell, nodes: (),
                            weight_sync=None)  # type: ignore[arg-type]
    try:
        rollouts.executions.take_over(CarriedOver(finished=records, running=[], next_seq=3), resume=1)
        assert rollouts.claims.claim(index=0, take=((0, 0, 3),)) == 1
    finally:
        rollouts.close()
        gateway.close()
    batch = json.loads(run.batch_file(0).read_text())
    assert [e["execution"] for e in batch["executions"]] == ["e000000", "e000001"]
    assert batch["left_out"] == ["e000002"]
