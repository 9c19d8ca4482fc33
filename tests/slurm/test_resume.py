"""A run outlives its head: the coordinator is killed (kill -9), then the job is cancelled, and
each time ``gyrectl launch --resume`` submits a new head that replays the journal, keeps every
finished trajectory and trained step, runs again what was in flight, and completes the run. It
keeps two weight versions (``training.keep_checkpoints=2``): each head reads only the newest."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from gyrectl.coordinator.events import Resumed, TrainEnded
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records

from runs import batches, events, execution_records, launch_loop, status, wait_for, wait_until_ended

pytestmark = [pytest.mark.usefixtures("slurm_cluster"), pytest.mark.vllm, pytest.mark.loop, pytest.mark.slow]
STEPS = 3


def _mid_rollout(cli, run_dir: Path, *, steps_done: int) -> None:
    """Waits until ``steps_done`` steps are trained and executions are running."""
    wait_for(lambda: len((v := status(cli, run_dir))["steps"]) >= steps_done and v["executions"]["in_flight"] > 0,
             timeout=600, what=f"step {steps_done} trained with executions in flight", every=0.5)
    time.sleep(2.0)  # the executions are mid-call


def _resume(cli, run_dir: Path) -> str:
    result = cli("launch", "--resume", str(run_dir), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["job_id"]


@pytest.fixture(scope="module")
def resumed_twice(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    run_dir = launch_loop(cli, root=tmp_path_factory.mktemp("runs"), model=tiny_model_dir, name="resumed",
                          extra=("--set", "training.keep_checkpoints=2"))
    _mid_rollout(cli, run_dir, steps_done=1)
    head = [r for r in read_records(run_dir / "journal.jsonl") if r.get("event") == "head_started"][-1]
    os.kill(head["pid"], signal.SIGKILL)  # the coordinator dies without a word
    killed_at = time.time()
    after_kill = wait_until_ended(cli, run_dir, timeout=120)
    refused = cli("launch", "--resume", str(run_dir), "--set", "run.steps=9")

    second_job = _resume(cli, run_dir)
    _mid_rollout(cli, run_dir, steps_done=2)
    assert cli("status", str(run_dir)).returncode == 0
    os.system(f"scancel {second_job}")
    after_cancel = wait_until_ended(cli, run_dir, timeout=120)

    _resume(cli, run_dir)
    final = wait_until_ended(cli, run_dir, timeout=900)
    again = cli("launch", "--resume", str(run_dir))
    return {"run_dir": run_dir, "killed_at": killed_at, "after_kill": after_kill, "after_cancel": after_cancel,
            "final": final, "refused": refused, "again": again}


def test_status_says_how_each_head_ended(resumed_twice) -> None:
    assert resumed_twice["after_kill"]["job"]["state"] == "ended"
    assert resumed_twice["after_kill"]["job"]["reason"] != "completed"
    assert resumed_twice["after_cancel"]["job"]["reason"] == "cancelled"  # the head journaled its SIGTERM
    assert (resumed_twice["final"]["job"]["reason"], len(resumed_twice["final"]["steps"])) == ("completed", STEPS)


def test_resume_refuses_overrides_and_a_completed_run(resumed_twice) -> None:
    for result, words in ((resumed_twice["refused"], "--set"), (resumed_twice["again"], "already completed")):
        assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr


def test_every_step_trained_once_and_no_trajectory_lost_or_reused(resumed_twice) -> None:
    run_dir = resumed_twice["run_dir"]
    journal = events(run_dir)
    assert sum(isinstance(e, Resumed) for e in journal) == 2
    assert [e.index for e in journal if isinstance(e, TrainEnded)] == list(range(STEPS))
    seq_of = {r["execution"]: r["seq"] for r in execution_records(run_dir)}
    trained = [e for step in batches(run_dir).values() for e in step]
    batch = resumed_twice["final"]["executions"]["trained"] // STEPS
    assert sorted(seq_of[e] for e in trained) == list(range(STEPS * batch)), "each sequence number trained once"
    # (a margin: an execution ending in the kill's last instant may not have been journaled)
    kept = {r["execution"] for r in execution_records(run_dir) if r["ended_at"] < resumed_twice["killed_at"] - 1}
    assert kept and kept <= set(trained), "trajectories finished before the kill were kept and trained"
    rerun = [e for e in trained if "-r" in e]
    assert rerun, "the executions cut by the kill ran again under new ids"


def test_the_resumed_run_ends_with_the_two_newest_weight_versions(resumed_twice) -> None:
    assert RunDir(resumed_twice["run_dir"]).weight_versions() == [0, STEPS - 1, STEPS]
