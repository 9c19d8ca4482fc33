"""Fault drills on the real test cluster, during one elastic run of the whole loop:

- a vLLM server step is killed under running agent sessions (``scancel JOB.STEP``, which sends
  SIGKILL to its tasks): the coordinator starts a new server on the cell, the gateway re-sends the
  cut calls, the harnesses see no error;
- the resident torchrun member that trains every step after the first is killed mid-step: the
  step is run again, by a new training group, from its input weights with the same batch; no
  trajectory is lost or trained twice.

A driver thread injects the faults from outside, as an operator (or the node's OOM killer) would.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gyrectl.coordinator.events import PhaseChanged, StepFailed, TrainEnded, TrainRetried, TrainStarted
from gyrectl.coordinator.state import Phase

from run_processes import assert_nothing_left
from runs import (
    batches,
    events,
    execution_records,
    launch_loop,
    reused_step_under_way,
    slurm_steps,
    status,
    wait_until_ended,
)

pytestmark = [pytest.mark.usefixtures("slurm_cluster"), pytest.mark.vllm, pytest.mark.loop, pytest.mark.slow]
STEPS = 4
BATCH = 8


@dataclass
class Drills:
    run_dir: Path
    cli: object
    server_killed_at: float = 0.0
    train_killed: list[str] = field(default_factory=list)
    train_killed_in: int = -1
    log: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            self._kill_a_serving_server()
            self._kill_a_training_step()
        except Exception as exc:  # reported by the tests through the log
            self.log.append(f"driver failed: {exc!r}")

    def _kill_a_serving_server(self) -> None:
        # Once weights v1 serve (cell 1 is returning), cell 0 is the only server with sessions on it.
        # Kill just after a fresh dispatch: sessions seen in flight by an earlier poll may be a
        # second from their end (a status call takes a second or two on a busy machine), and a
        # kill after they ended would test nothing.
        dispatched = None
        while not self.stop.is_set():
            view = status(self.cli, self.run_dir)
            cells, executions = view.get("cells") or [], view["executions"]
            fresh = dispatched is not None and executions.get("dispatched", 0) > dispatched
            dispatched = executions.get("dispatched", 0)
            if view["steps"] and executions["in_flight"] > 0 and fresh and cells and cells[0]["phase"] == "rollout":
                break
            time.sleep(0.5)
        time.sleep(2.0)  # let the sessions get mid-call
        name, step = next((n, s) for n, s in slurm_steps().items() if n.endswith("-rollout-cell0"))
        subprocess.run(["scancel", step], check=True)
        self.server_killed_at = time.time()
        self.log.append(f"killed server step {step} ({name})")

    def _kill_a_training_step(self) -> None:
        # Mid-step in the resident member that trains every step after the first: killed as soon
        # as the coordinator asks it for a step (its request file), while the step is under way.
        member = None
        while not self.stop.is_set() and not self.train_killed:
            member = member or next(((n, s) for n, s in slurm_steps().items() if "-train-step" in n), None)
            index = reused_step_under_way(self.run_dir) if member else None
            if index is None or index == 0:
                time.sleep(0.02)
                continue
            name, step = member
            if subprocess.run(["scancel", step], check=False).returncode == 0:
                self.train_killed.append(name)
                self.train_killed_in = index
                self.log.append(f"killed training step {step} ({name}) in step {index}")
            else:
                member = None  # that member had left (its group was replaced): find the current one


@pytest.fixture(scope="module")
def drilled(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Drills]:
    run_dir = launch_loop(cli, root=tmp_path_factory.mktemp("runs"), model=tiny_model_dir, name="drills",
                          extra=("--set", f"run.steps={STEPS}", "--set", f"training.batch_executions={BATCH}",
                                 "--set", "rollout.execution_time_limit_s=400"))
    drills = Drills(run_dir, cli)
    driver = threading.Thread(target=drills.run, daemon=True)
    driver.start()
    try:
        view = wait_until_ended(cli, run_dir, timeout=1200)
    finally:
        drills.stop.set()
        driver.join(timeout=30)
    return run_dir, view, drills


def test_the_run_survives_its_faults(drilled) -> None:
    run_dir, view, drills = drilled
    assert (view["job"]["state"], view["job"]["reason"]) == ("ended", "completed"), (view["job"], drills.log)
    assert [s["step"] for s in view["steps"]] == list(range(STEPS))


def test_a_killed_server_is_restarted_and_its_sessions_continue(drilled) -> None:
    run_dir, _, drills = drilled
    assert drills.server_killed_at, drills.log
    journal = events(run_dir)
    failed = [e for e in journal if isinstance(e, StepFailed) and e.role == "rollout"]
    assert [e.cell for e in failed] == [0], drills.log
    after = journal[journal.index(failed[0]) + 1:]
    restarted = [e for e in after if isinstance(e, PhaseChanged) and e.cell == 0]
    assert [e.phase for e in restarted[:2]] == [Phase.STARTING, Phase.ROLLOUT], "cell 0 serves again"
    records = execution_records(run_dir)
    cut = [r for r in records if r["started_at"] < drills.server_killed_at < r["ended_at"]]
    assert cut, "sessions were running on the killed server"
    # harness-visible errors: 0 (each harness exits non-zero on an API error)
    assert [r for r in records if r["status"] != "ok" or r["exit_code"] != 0] == []


def test_a_killed_training_step_is_retried_without_losing_or_reusing_a_trajectory(drilled) -> None:
    run_dir, view, drills = drilled
    assert drills.train_killed, drills.log
    journal = events(run_dir)
    retried = [e for e in journal if isinstance(e, TrainRetried)]
    assert [e.index for e in retried] == [drills.train_killed_in], drills.log
    killed = next(e for e in journal if isinstance(e, TrainStarted) and e.index == drills.train_killed_in)
    assert killed.reused, "the member died in a step it trained on the state it held"
    assert [e.index for e in journal if isinstance(e, TrainEnded)] == list(range(STEPS))
    assert any(isinstance(e, StepFailed) and e.role == "train" for e in journal)
    trained = [e for step in batches(run_dir).values() for e in step]
    assert len(trained) == len(set(trained)) == STEPS * BATCH, "lost 0, trained twice 0"
    assert view["executions"]["trained"] == STEPS * BATCH


def test_no_process_of_the_drilled_run_is_left_on_any_node(drilled) -> None:
    """Every task runs under a step keeper: with ``proctrack/linuxproc`` a killed step's orphans
    (vLLM's engine core, torchrun's workers) would escape Slurm's end of the step. The test
    cluster's nodes share this machine, so ``/proc`` here sees all of them."""
    run_dir, _, _ = drilled
    assert_nothing_left(run_dir)
