"""Faults of warm engines and resident trainers on the embedded default (issue 26), injected as an
operator would while the run goes on: each run completes with the right number of steps, its
journal shows the fault answered the way the docs say, and afterwards no process of the run is
left (a scan of ``/proc`` for the run directory in command lines and environments: vLLM's engine
core and torchrun's workers carry ``GYRECTL_RUN_DIR``).

Two runs of the colocate policy, where every cell moves both ways each step, its server asleep
while it trains, under one resident trainer group:

- *servers*: cell 0's sleeping server killed (``kill -9``) while its cell trains; later cell 1's
  sleeping server frozen (SIGSTOP) across its wake, which must not hold the other cell up;
- *trainers*: cell 1's resident trainer worker killed while the group waits, then again in the
  middle of a step; then the head killed during a reused step with both cells asleep, and the
  run resumed with ``gyrectl launch --resume``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gyrectl.cluster.keeper import descendants
from gyrectl.coordinator.events import (
    Dispatched,
    PhaseChanged,
    Resumed,
    StepFailed,
    TrainerReleased,
    TrainRetried,
    TrainStarted,
    from_record,
    is_event_record,
)
from gyrectl.coordinator.state import Phase

from run_processes import assert_nothing_left, read_proc

pytestmark = [pytest.mark.loop, pytest.mark.vllm, pytest.mark.slow]
WAKE_TIMEOUT_S = 5.0
KILLED = 128 + signal.SIGKILL
"""A training member whose worker was killed exits as the worker did (``gyrectl.train.torchrun``)."""


def launch(cli, tiny_model_dir: Path, root: Path, *, name: str, steps: int, port: int) -> tuple[Path, int]:
    result = cli("launch", "configs/local-tiny.yaml", "--json", "--set", f"run.output_root={root}",
                 "--set", f"model.path={tiny_model_dir}", "--set", f"run.name={name}", "--set", f"run.steps={steps}",
                 "--set", "scheduler.policy=colocate", "--set", "scheduler.min_rollout_cells=0",
                 "--set", "training.batch_executions=16", "--set", f"rollout.server_port={port}",
                 "--set", f"rollout.wake_timeout_s={WAKE_TIMEOUT_S}", "--set", "eval.at_start=false",
                 "--set", "eval.at_end=false", "--set", "eval.every_steps=0")
    assert result.returncode == 0, result.stderr
    return root / name, _head_pid(json.loads(result.stdout)["job_id"])


def _head_pid(job_id: str) -> int:
    return int(job_id.removeprefix("local-"))


class JournalTail:
    """The run's journal as it grows: each new record, in order, to ``on_record``."""

    def __init__(self, run_dir: Path):
        self.path, self.offset, self.records = run_dir / "journal.jsonl", 0, []

    def follow(self, on_record: Callable[[dict], None], *, until: Callable[[dict], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for record in self._new():
                self.records.append(record)
                on_record(record)
                if until(record):
                    return
            time.sleep(0.1)
        raise AssertionError(f"timed out; journal ends with {self.records[-3:]}")

    def _new(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[:data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def events(self) -> list:
        return [from_record(r) for r in self.records if is_event_record(r)]


def _ended(record: dict) -> bool:
    return record.get("event") == "head_ended"


def server_of(port: int) -> list[int]:
    """The processes of the vLLM server on ``port``: its API server first, then its engine's."""
    needle = f"\0--port\0{port}\0".encode()
    for entry in os.scandir("/proc"):
        cmdline = read_proc(f"/proc/{entry.name}/cmdline") if entry.name.isdigit() else b""
        if b"gyrectl.cluster.keeper" in cmdline and b"vllm" in cmdline and needle in cmdline:
            return descendants(int(entry.name))
    raise AssertionError(f"no server on port {port}")


def trainer_worker(run_dir: Path, cell: int) -> int:
    """The training worker of ``cell``'s member (torchrun's child running ``gyrectl.train``)."""
    mark = os.fsencode(str(run_dir.resolve()))
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        cmdline, environ = read_proc(f"/proc/{entry.name}/cmdline"), b"\0" + read_proc(f"/proc/{entry.name}/environ")
        if (b"gyrectl.train\0" in cmdline and b"gyrectl.cluster.keeper" not in cmdline
                and b"gyrectl.train.torchrun" not in cmdline and mark in environ
                and f"\0GYRECTL_CELL={cell}\0".encode() in environ and b"\0GYRECTL_ROLE=train\0" in environ):
            return int(entry.name)
    raise AssertionError(f"no trainer worker of cell {cell}")


def _status(cli, run_dir: Path) -> dict:
    """The ended run's ``status --json`` (the head exits a moment after it journals its end)."""
    deadline = time.monotonic() + 60
    while True:
        result = cli("status", str(run_dir), "--json")
        assert result.returncode == 0, result.stderr
        view = json.loads(result.stdout)
        if view["job"]["state"] == "ended" or time.monotonic() > deadline:
            return view
        time.sleep(0.5)


# -- servers ------------------------------------------------------------------------------------

SERVER_PORT, SERVER_STEPS = 18500, 4


@pytest.fixture(scope="module")
def server_faults(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    run_dir, _ = launch(cli, tiny_model_dir, tmp_path_factory.mktemp("runs"), name="servers", steps=SERVER_STEPS,
                        port=SERVER_PORT)
    tail, done = JournalTail(run_dir), {"killed_at": None, "frozen": []}

    def inject(record: dict) -> None:
        asleep = record.get("event") == "PhaseChanged" and record["phase"] == "train" and record["sleeping_server"]
        if asleep and record["cell"] == 0 and done["killed_at"] is None:
            os.kill(server_of(SERVER_PORT)[0], signal.SIGKILL)
            done["killed_at"] = record["at"]
        elif record.get("event") == "TrainEnded" and done["killed_at"] is not None:
            done["step_ended_after_kill"] = True
        elif asleep and record["cell"] == 1 and done.get("step_ended_after_kill") and not done["frozen"]:
            done["frozen"] = server_of(SERVER_PORT + 1)  # across its wake: the head must replace it
            for pid in done["frozen"]:
                os.kill(pid, signal.SIGSTOP)

    try:
        tail.follow(inject, until=_ended, timeout_s=1500)
    finally:
        for pid in done["frozen"]:  # should be gone: stopped by the head when it gave up waiting
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert done["frozen"], "the probe never reached a second sleeping cell 1"
    return {"run_dir": run_dir, "events": tail.events(), "ended": tail.records[-1], **done}


def test_the_run_with_server_faults_completes_with_every_step(cli, server_faults) -> None:
    assert server_faults["ended"]["reason"] == "completed", server_faults["ended"]
    view = _status(cli, server_faults["run_dir"])
    assert (view["job"]["reason"], len(view["steps"])) == ("completed", SERVER_STEPS)
    faults = [(f["cell"], f["kind"], f["recovery"]) for f in view["faults"]]
    assert faults == [(0, "sleeping_server_died", "cold start on return"), (1, "wake_timed_out", "replaced")]
    assert all(f["seconds"] is not None for f in view["faults"])


def test_a_killed_sleeping_server_is_forgotten_and_its_cell_cold_starts_on_return(server_faults) -> None:
    events = server_faults["events"]
    [died] = [e for e in events if isinstance(e, StepFailed) and e.cell == 0]
    assert (died.role, died.exit_code, died.reason) == ("rollout", -signal.SIGKILL, "")
    back = next(e for e in events if isinstance(e, PhaseChanged) and e.cell == 0 and e.phase is Phase.RETURNING
                and e.at >= died.at)
    assert not back.warm and back.step_id != died.step_id


def test_a_server_frozen_across_its_wake_is_replaced_without_holding_the_other_cell(server_faults) -> None:
    events = server_faults["events"]
    [timed_out] = [e for e in events if isinstance(e, StepFailed) and e.cell == 1]
    assert (timed_out.role, timed_out.reason) == ("rollout", "wake_timeout")
    woke = [e for e in events if isinstance(e, PhaseChanged) and e.phase is Phase.RETURNING and e.warm
            and e.at <= timed_out.at]
    frozen_wake = max((e for e in woke if e.cell == 1), key=lambda e: e.at)
    assert WAKE_TIMEOUT_S <= timed_out.at - frozen_wake.at < WAKE_TIMEOUT_S + 3
    other_back = max((e for e in events if isinstance(e, PhaseChanged) and e.cell == 0 and e.phase is Phase.ROLLOUT
                      and e.at <= timed_out.at), key=lambda e: e.at)
    assert other_back.at - frozen_wake.at < 3, "the other cell waited for the frozen one"
    assert any(isinstance(e, Dispatched) and other_back.at <= e.at < timed_out.at for e in events), \
        "rollout did not go on while the frozen server was waited for"
    replaced = next(e for e in events if isinstance(e, PhaseChanged) and e.cell == 1 and e.at >= timed_out.at)
    assert (replaced.phase, replaced.warm) == (Phase.RETURNING, False) and replaced.step_id != timed_out.step_id


def test_no_process_of_the_server_faults_run_is_left(server_faults) -> None:
    assert_nothing_left(server_faults["run_dir"])


# -- trainers and the head ----------------------------------------------------------------------

TRAINER_PORT, TRAINER_STEPS = 18600, 5


@pytest.fixture(scope="module")
def trainer_faults(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    run_dir, head = launch(cli, tiny_model_dir, tmp_path_factory.mktemp("runs"), name="trainers",
                           steps=TRAINER_STEPS, port=TRAINER_PORT)
    tail, done = JournalTail(run_dir), {}

    def inject(record: dict) -> None:
        if record.get("event") == "TrainEnded" and record["index"] == 0:  # the group waits: kill a member's worker
            os.kill(trainer_worker(run_dir, 1), signal.SIGKILL)
        elif record.get("event") == "TrainStarted" and record["index"] == 2:
            assert record["reused"], "step 2 should reuse the group step 1 started"
            os.kill(trainer_worker(run_dir, 1), signal.SIGKILL)  # in the middle of its step
        elif record.get("event") == "TrainStarted" and record["index"] == 3 and "head_killed_at" not in done:
            done["asleep"] = record["reused"] and all(
                next(r for r in reversed(tail.records) if r.get("event") == "PhaseChanged" and r["cell"] == c)
                ["sleeping_server"] for c in (0, 1))
            os.kill(head, signal.SIGKILL)
            done["head_killed_at"] = time.time()

    tail.follow(inject, until=lambda record: "head_killed_at" in done, timeout_s=1500)
    assert_nothing_left(run_dir)  # the dead head's servers and trainer stopped themselves
    done["left_after_kill"] = "none"
    resumed = cli("launch", "--resume", str(run_dir), "--json")
    assert resumed.returncode == 0, resumed.stderr
    tail.follow(lambda record: None, until=_ended, timeout_s=1500)
    return {"run_dir": run_dir, "events": tail.events(), "ended": tail.records[-1], **done}


def test_the_run_with_trainer_faults_and_a_killed_head_completes_every_step_once(cli, trainer_faults) -> None:
    assert trainer_faults["ended"]["reason"] == "completed", trainer_faults["ended"]
    view = _status(cli, trainer_faults["run_dir"])
    assert (view["job"]["reason"], len(view["steps"])) == ("completed", TRAINER_STEPS)
    kinds = {(f["kind"], f["recovery"]) for f in view["faults"]}
    assert {("idle_trainer_died", "trainer re-formed"), ("trainer_died", "step retried"),
            ("head_restarted", "resumed")} <= kinds, view["faults"]
    assert all(f["seconds"] is not None for f in view["faults"])
    lines = [json.loads(line) for line in (trainer_faults["run_dir"] / "metrics.jsonl").read_text().splitlines()]
    assert sorted(line["step"] for line in lines) == list(range(TRAINER_STEPS))


def test_a_resident_member_that_dies_while_the_group_waits_releases_it(trainer_faults) -> None:
    events = trainer_faults["events"]
    released = next(e for e in events if isinstance(e, TrainerReleased))
    failures = [(e.cell, e.role, e.exit_code) for e in events if isinstance(e, StepFailed) and e.at <= released.at]
    # the killed worker's cell, with its exit; a peer that failed on the broken group first exits 1
    assert [f for f in failures if f[2] == KILLED] == [(1, "train", KILLED)], failures
    assert all(f[2] in (KILLED, 1) for f in failures), failures
    step1 = next(e for e in events if isinstance(e, TrainStarted) and e.index == 1)
    assert released.at <= step1.at and not step1.reused, "no silent respawn, a new group"


def test_a_member_killed_mid_step_is_named_and_the_step_retried_once(trainer_faults) -> None:
    events = trainer_faults["events"]
    step2 = next(e for e in events if isinstance(e, TrainStarted) and e.index == 2)
    failures = [e for e in events if isinstance(e, StepFailed) and e.at >= step2.at]
    assert failures and all(e.role == "train" for e in failures)
    assert [(e.cell, e.exit_code) for e in failures if e.exit_code == KILLED] == [(1, KILLED)]
    assert [e.index for e in events if isinstance(e, TrainRetried)] == [2]


def test_a_head_killed_in_a_reused_step_with_both_cells_asleep_resumes(trainer_faults) -> None:
    assert trainer_faults["asleep"], "the head was not killed in a reused step with both cells asleep"
    assert trainer_faults["left_after_kill"] == "none"
    assert sum(isinstance(e, Resumed) for e in trainer_faults["events"]) == 1


def test_no_process_of_the_trainer_faults_run_is_left(trainer_faults) -> None:
    assert_nothing_left(trainer_faults["run_dir"])
