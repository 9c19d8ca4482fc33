"""Executions in directories of their own, and in a bubblewrap sandbox for real: a harness that
tries to write outside its directory, or to read the run's secrets, fails to, and its execution
is scored as usual. The apptainer command is checked as text (no apptainer here)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from gyrectl.coordinator.events import Finished
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.rollout.harnesses import HarnessRunner
from gyrectl.rollout.live import live_rollouts
from gyrectl.rollout.sandbox import Sandbox, apptainer_argv, bwrap_argv
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records

# Tries what a careless or hostile agent might, and reports what happened.
HARNESS = """
import json, os, pathlib
def attempt(action):
    try:
        action()
        return "done"
    except OSError as exc:
        return type(exc).__name__
launch = pathlib.Path(os.environ["GYRECTL_LAUNCH_DIR"])
token = pathlib.Path(os.environ["RUN_DIR"]) / "token"
report = {
    "inside": attempt(lambda: pathlib.Path("notes.txt").write_text("mine")),
    "launch_dir": attempt(lambda: (launch / "escaped.txt").write_text("x")),
    "run_dir": attempt(lambda: (token.parent / "escaped.txt").write_text("x")),
    "read_token": attempt(lambda: token.read_text()),
    "cwd": os.getcwd(),
}
print(json.dumps({"answer": "123", "report": report}))
"""


def test_bwrap_argv_masks_the_run_directory_after_the_launch_directory_and_binds_the_workdir_last():
    argv = bwrap_argv(["python", "h.py"], workdir=Path("/l/runs/r/workdirs/e1"), readable=[Path("/l")],
                      hidden=[Path("/l/runs/r")])
    tmp, launch, bind = argv.index("/tmp"), argv.index("/l"), argv.index("--bind")
    mask = argv.index("--tmpfs", tmp)
    assert tmp < launch < mask < bind and argv[mask + 1] == "/l/runs/r"
    assert argv[argv.index("--chdir") + 1] == "/l/runs/r/workdirs/e1" and argv[-3:] == ["--", "python", "h.py"]
    assert "--share-net" not in argv and "--unshare-net" not in argv  # the gateway is on the network


def test_the_apptainer_command_binds_the_workdir_and_reads_the_rest_read_only():
    assert apptainer_argv(["python", "h.py"], workdir=Path("/w/e1"), readable=[Path("/data")], image="agent.sif") == [
        "apptainer", "exec", "--containall", "--no-home", "--bind", "/w/e1:/w/e1", "--pwd", "/w/e1",
        "--bind", "/data:/data:ro", "agent.sif", "python", "h.py"]


@pytest.mark.parametrize("keep", [True, False])
def test_a_sandboxed_harness_writes_only_its_own_directory_and_is_scored(tmp_path, keep):
    assert shutil.which("bwrap"), "bubblewrap is not installed: scripts/setup.sh installs it"
    launch_dir = tmp_path / "launch"
    launch_dir.mkdir()
    (launch_dir / "harness.py").write_text(HARNESS)
    run = RunDir.create(launch_dir / "runs", "r")  # inside the launch directory, as by default
    sandbox = Sandbox("bwrap", readable=(launch_dir,), hidden=(run.path,))
    harnesses = HarnessRunner(command=[sys.executable, str(launch_dir / "harness.py")], cwd=launch_dir,
                              env={"RUN_DIR": str(run.path)}, time_limit_s=60, logs_dir=run.logs_dir / "executions",
                              workdirs=run.workdir, sandbox=sandbox, keep_workdirs=keep)
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=("tiny",)), sink=None)
    rollouts = live_rollouts(run=run, gateway=gateway, harnesses=harnesses, tasks=[{"id": "t"}], executions_per_task=1,
                            batch_executions=1, verifier=lambda task, output: float(output["answer"] == "123"),
                            servers=[], replicas_of=lambda cell, nodes: (), weight_sync=None)  # type: ignore[arg-type]
    try:
        rollouts.executions.dispatch(count=1, version=0)
        events, deadline = [], time.monotonic() + 60
        while not any(isinstance(e, Finished) for e in events):
            assert time.monotonic() < deadline, "the sandboxed harness did not finish"
            events += rollouts.executions.poll()
            rollouts.clock.wait()
    finally:
        rollouts.close()
        gateway.close()
    (record,) = [r for r in read_records(run.executions_file) if "status" in r]
    assert (record["status"], record["reward"], record["exit_code"]) == ("ok", 1.0, 0)
    report = json.loads((run.logs_dir / "executions" / "e000000.out").read_text().splitlines()[-1])["report"]
    workdir = run.workdir("e000000")
    assert report["cwd"] == str(workdir) and report["inside"] == "done"
    assert report["launch_dir"] != "done" and not (launch_dir / "escaped.txt").exists()
    assert report["run_dir"] != "done" and not (run.path / "escaped.txt").exists()
    assert report["read_token"] != "done"  # the run's secrets are masked
    assert (workdir / "notes.txt").exists() == keep
