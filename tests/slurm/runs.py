"""Helpers for the tests that run the whole loop on the test cluster: launch, wait, read what
the run wrote, and find its Slurm steps."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from gyrectl.coordinator.events import Event
from gyrectl.coordinator.journal import read_events
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records


def wait_for(predicate, *, timeout: float = 60.0, what: str = "condition", every: float = 0.3):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(every)


def status(cli, run_dir: Path) -> dict[str, Any]:
    result = cli("status", str(run_dir), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def launch_loop(cli, *, root: Path, model: Path, name: str, extra: tuple[str, ...] = ()) -> Path:
    """``gyrectl launch configs/slurm-tiny.yaml`` with its outputs under ``root``; returns the run dir."""
    result = cli("launch", "configs/slurm-tiny.yaml", "--json", "--set", f"run.output_root={root}",
                 "--set", f"run.name={name}", "--set", f"model.path={model}", *extra)
    assert result.returncode == 0, result.stderr
    return Path(json.loads(result.stdout)["run_dir"])


def wait_until_ended(cli, run_dir: Path, *, timeout: float) -> dict[str, Any]:
    try:
        return wait_for(lambda: (v := status(cli, run_dir))["job"]["state"] == "ended" and v, timeout=timeout,
                        what=f"{run_dir.name} to end", every=2.0)
    except AssertionError:
        job = json.loads((run_dir / "job.json").read_text())["job_id"]
        subprocess.run(["scancel", job], check=False)
        raise AssertionError(f"{run_dir.name} did not end in {timeout:.0f} s\n{diagnose(run_dir)}") from None


def diagnose(run_dir: Path) -> str:
    """The last lines of the head's log and journal, for a failing assertion."""
    parts = []
    for log in sorted((run_dir / "logs" / "submitit").glob("*_0_log.err")) + [run_dir / "journal.jsonl"]:
        if log.exists():
            parts.append(f"--- {log.name} ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:]))
    return "\n".join(parts)


def events(run_dir: Path) -> list[Event]:
    return read_events(run_dir / "journal.jsonl")


def execution_records(run_dir: Path) -> list[dict[str, Any]]:
    """One record per finished execution (the executions log also holds which step took each)."""
    return [r for r in read_records(run_dir / "trajectories" / "executions.jsonl") if "status" in r]


def batches(run_dir: Path) -> dict[int, list[str]]:
    """Executions each training step consumed, from its batch file."""
    found = {}
    for path in sorted((run_dir / "batches").glob("step-*.json")):
        batch = json.loads(path.read_text())
        found[batch["step"]] = [e["execution"] for e in batch["executions"]]
    return found


def slurm_steps() -> dict[str, str]:
    """Every running Slurm step of the cluster, ``{name: JOB.STEP}`` (gyrectl names a step after
    its own step id, ``3-rollout-cell0``)."""
    out = subprocess.run(["squeue", "-h", "-s", "-o", "%i|%j"], capture_output=True, text=True, check=False).stdout
    return {name: step for step, _, name in (line.partition("|") for line in out.split()) if name}


def reused_step_under_way(run_dir: Path) -> int | None:
    """The step a resident trainer was asked to train and has not committed yet, or None.

    A reused step of the tiny model lasts two or three seconds, too short to find by polling
    ``status`` (a second or two per call on a busy machine): a drill that must land mid-step
    watches for the coordinator's request file instead, which appears as the step begins."""
    run = RunDir(run_dir)
    asked = sorted(run.trainer_dir.glob("request-*.json")) if run.trainer_dir.exists() else []
    index = int(asked[-1].stem.removeprefix("request-")) if asked else None
    return index if index is not None and not run.weights_dir(index + 1).exists() else None


def crash_node(node: str) -> None:
    """A node crash as the test cluster can have one: every process of the node's network
    namespace (slurmd, job scripts, steps) gets kill -9."""
    pids = subprocess.run(["ip", "netns", "pids", f"gyre-{node}"], capture_output=True, text=True,
                          check=True).stdout.split()
    subprocess.run(["kill", "-9", *pids], check=False)


def idle_nodes() -> int:
    out = subprocess.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], capture_output=True, text=True).stdout.split()
    return sum(int(n) for n in out)

