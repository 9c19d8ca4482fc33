"""Harnesses that misbehave, as real processes through the coordinator's rollout port (no model:
each harness is a small script). The run goes on or stops as ``rollout.infra_failures`` says,
and nothing a harness started is left running once it ended."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gyrectl.config.schema import InfraFailureBudget
from gyrectl.coordinator.events import Finished
from gyrectl.errors import RuntimeFailure
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.rollout.harnesses import OUTPUT_TAIL_BYTES, HarnessRunner
from gyrectl.rollout.live import LiveRollouts, live_rollouts
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records

# What each task asks of the harness: ``mode`` picks the misbehaviour; ``pids`` is a folder where
# it and the children it forks write their pids, so the test can look for survivors.
HARNESS = """
import json, os, random, signal, subprocess, sys, time
task = json.loads(os.environ["GYRECTL_TASK"])
execution = os.environ["GYRECTL_EXECUTION"]
mode = task["mode"]
open(os.path.join(task["pids"], execution), "w").write(str(os.getpid()))
def answer():
    print(json.dumps({"answer": "7"}), flush=True)
if mode == "import_error":
    print("Traceback (most recent call last):", file=sys.stderr)
    print("ModuleNotFoundError: No module named 'agentlib'", file=sys.stderr)
    sys.exit(1)
if mode == "random_exit":
    if random.Random(execution).random() < 0.3:
        sys.exit(random.Random(execution).choice([1, 2, 137]))
    answer()
if mode == "garbage_then_answer":
    sys.stdout.buffer.write(b"\\xff\\xfe not json {" * 1000 + b"\\n")
    sys.stdout.buffer.write(b"x" * task["huge"] + b"\\n")
    answer()
if mode == "huge_line_only":
    sys.stdout.buffer.write(b"{" * task["huge"])
if mode == "hang":
    time.sleep(600)
if mode in ("stubborn_child", "stubborn_child_then_hang"):
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    open(os.path.join(task["pids"], execution + "-child"), "w").write(str(child.pid))
    answer()
    if mode == "stubborn_child_then_hang":
        time.sleep(600)
"""


def _score(task: dict, output: dict) -> float:
    return float(output.get("answer") == "7")


@pytest.fixture
def make_rollouts(tmp_path: Path):
    made: list[tuple[LiveRollouts, BackgroundGateway]] = []
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)

    def make(tasks: list[dict], *, budget: InfraFailureBudget = InfraFailureBudget(), batch: int = 8,
             time_limit_s: float = 30.0) -> tuple[LiveRollouts, RunDir]:
        run = RunDir.create(tmp_path / "runs", f"r{len(made)}")
        gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=("tiny",)), sink=None)
        runner = HarnessRunner(command=[sys.executable, str(harness)], cwd=tmp_path, env={}, time_limit_s=time_limit_s,
                               logs_dir=run.logs_dir / "executions", kill_grace_s=0.5)
        rollouts = live_rollouts(run=run, gateway=gateway, harnesses=runner, tasks=tasks, executions_per_task=1,
                                batch_executions=batch, verifier=_score, servers=[], replicas_of=lambda c, n: (),
                                weight_sync=None, infra_failures=budget)  # type: ignore[arg-type]
        made.append((rollouts, gateway))
        return rollouts, run

    yield make
    for rollouts, gateway in made:
        rollouts.close()
        gateway.close()


def _tasks(tmp_path: Path, mode: str, count: int, **extra) -> list[dict]:
    pids = tmp_path / "pids"
    pids.mkdir(exist_ok=True)
    return [{"id": f"{mode}-{i}", "mode": mode, "pids": str(pids), **extra} for i in range(count)]


def _finish(rollouts: LiveRollouts, count: int, timeout: float = 60.0) -> list[Finished]:
    finished, deadline = [], time.monotonic() + timeout
    while len(finished) < count:
        assert time.monotonic() < deadline, f"only {len(finished)} of {count} executions ended"
        finished += [e for e in rollouts.executions.poll() if isinstance(e, Finished)]
        rollouts.clock.wait()
    return finished


def _failure(rollouts: LiveRollouts, timeout: float = 60.0) -> str:
    """Polls as the coordinator does until the run fails; returns why."""
    deadline = time.monotonic() + timeout
    with pytest.raises(RuntimeFailure) as failure:
        while time.monotonic() < deadline:
            rollouts.executions.poll()
            rollouts.clock.wait()
    return str(failure.value)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _survivors(tmp_path: Path) -> list[str]:
    return [f.name for f in (tmp_path / "pids").iterdir() if _alive(int(f.read_text()))]


def test_a_harness_that_cannot_start_fails_the_run_quoting_its_stderr(make_rollouts, tmp_path):
    rollouts, run = make_rollouts(_tasks(tmp_path, "import_error", 8), budget=InfraFailureBudget(first=4))
    rollouts.executions.dispatch(count=8, version=0)
    message = _failure(rollouts)
    assert "the first 4 executions all ended as infrastructure failures (rollout.infra_failures.first=4)" in message
    assert "exit code 1" in message and "ModuleNotFoundError: No module named 'agentlib'" in message
    assert "without printing a JSON object" in message
    statuses = [r["status"] for r in read_records(run.executions_file) if "status" in r]
    assert len(statuses) >= 4 and set(statuses) == {"infra_failure"}


def test_a_harness_that_exits_at_random_is_a_failure_each_time_and_the_run_goes_on(make_rollouts, tmp_path):
    tasks = _tasks(tmp_path, "random_exit", 24)
    rollouts, run = make_rollouts(tasks, budget=InfraFailureBudget(first=8, window=12, max_share=0.5), batch=24)
    rollouts.executions.dispatch(count=24, version=0)
    finished = _finish(rollouts, 24)  # about 3 in 10 fail: within the budget, so no raise
    failed = {e.seq for e in finished if e.infra_failure}
    assert 0 < len(failed) < 12
    left_out = rollouts.claims.claim(index=0, take=((0, 0, 24),))
    batch = json.loads(run.batch_file(0).read_text())
    assert left_out == len(failed) == len(batch["left_out"]) and len(batch["executions"]) == 24 - len(failed)
    assert all(e["reward"] == 1.0 for e in batch["executions"])  # no failure became a zero reward


def test_a_harness_that_breaks_halfway_stops_the_run_once_the_window_is_over_its_share(make_rollouts, tmp_path):
    tasks = _tasks(tmp_path, "stubborn_child", 6) + _tasks(tmp_path, "import_error", 10)  # ok at first, then not
    rollouts, _ = make_rollouts(tasks, budget=InfraFailureBudget(first=4, window=8, max_share=0.5), batch=16)
    rollouts.executions.dispatch(count=6, version=0)
    assert not any(e.infra_failure for e in _finish(rollouts, 6))
    rollouts.executions.dispatch(count=10, version=0)
    assert "5 of the last 8 executions ended as infrastructure failures" in _failure(rollouts)


def test_garbage_and_a_huge_line_on_stdout_cost_no_more_than_the_tail(make_rollouts, tmp_path):
    huge = OUTPUT_TAIL_BYTES + (1 << 20)
    tasks = _tasks(tmp_path, "garbage_then_answer", 2, huge=huge) + _tasks(tmp_path, "huge_line_only", 2, huge=huge)
    rollouts, run = make_rollouts(tasks, batch=4)
    rollouts.executions.dispatch(count=4, version=0)
    finished = {e.seq: e for e in _finish(rollouts, 4)}
    assert [finished[seq].infra_failure for seq in range(4)] == [False, False, True, True]
    rewards = {r["execution"]: r["reward"] for r in read_records(run.executions_file) if "status" in r}
    assert rewards["e000000"] == rewards["e000001"] == 1.0  # the answer after the garbage was found


def test_a_harness_that_hangs_without_calling_is_stopped_at_the_time_limit(make_rollouts, tmp_path):
    rollouts, run = make_rollouts(_tasks(tmp_path, "hang", 2), batch=2, time_limit_s=1.0)
    started = time.monotonic()
    rollouts.executions.dispatch(count=2, version=0)
    finished = _finish(rollouts, 2)
    assert time.monotonic() - started < 15 and all(e.timed_out and not e.infra_failure for e in finished)
    records = [r for r in read_records(run.executions_file) if "status" in r]
    assert [r["status"] for r in records] == ["timed_out"] * 2 and [r["reward"] for r in records] == [0.0] * 2
    assert _survivors(tmp_path) == []


@pytest.mark.parametrize("mode", ["stubborn_child", "stubborn_child_then_hang"])
def test_a_child_that_ignores_sigterm_does_not_outlive_its_harness(make_rollouts, tmp_path, mode):
    rollouts, _ = make_rollouts(_tasks(tmp_path, mode, 2), batch=2, time_limit_s=1.5)
    rollouts.executions.dispatch(count=2, version=0)
    finished = _finish(rollouts, 2)
    assert all(not e.infra_failure for e in finished)  # each printed its answer before it was stopped
    assert [e.timed_out for e in finished] == [mode.endswith("hang")] * 2
    deadline = time.monotonic() + 5
    while _survivors(tmp_path) and time.monotonic() < deadline:  # SIGKILL is delivered, not awaited
        time.sleep(0.05)
    assert _survivors(tmp_path) == []
    assert len(os.listdir(tmp_path / "pids")) == 4  # both harnesses and both children were seen
