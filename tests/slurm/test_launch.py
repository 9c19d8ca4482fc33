"""Launch onto the real local Slurm cluster in both layouts (one heterogeneous job; a head job
that submits one job per cell), the head's node table, status from the login node, and scancel /
stop reflected as ended."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from runs import status, wait_for

pytestmark = pytest.mark.usefixtures("slurm_cluster")


def _launch(cli, root: Path, *extra: str) -> dict:
    started = time.monotonic()
    result = cli("launch", "configs/slurm-local.yaml", "--json", "--set", f"run.output_root={root}", *extra)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 20, "launch must return within seconds"
    return json.loads(result.stdout)


def test_hetjob_node_table_status_and_scancel(cli, tmp_path: Path) -> None:
    launched = _launch(cli, tmp_path / "runs", "--set", "cluster.layout=hetjob")
    job_id, run_dir = launched["job_id"], launched["run_dir"]
    components = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i"], capture_output=True, text=True,
                                check=True).stdout.split()
    assert sorted(components) == [f"{job_id}+0", f"{job_id}+1"]

    nodes_file = Path(run_dir) / "nodes.json"
    wait_for(nodes_file.exists, what="the head's node table")
    nodes = json.loads(nodes_file.read_text())
    heads = [n for n in nodes if n["het_group"] == 0]
    workers = [n for n in nodes if n["het_group"] == 1]
    assert len(heads) == 1 and len(workers) == 4
    assert {n["name"] for n in nodes} == {f"node{i}" for i in range(1, 6)}
    assert all(n["gpus"] == 2 for n in workers) and all(n["role"] == "idle" for n in nodes)

    view = status(cli, run_dir)
    assert view["run_dir"] == run_dir
    assert view["job"]["id"] == job_id
    assert (view["job"]["state"], view["job"]["backend"]) == ("running", "slurm")
    assert [(n["name"], n["het_group"], n["gpus"], n["role"]) for n in view["nodes"]] == \
        [(n["name"], n["het_group"], n["gpus"], "idle") for n in nodes]
    # by name under the output root, too
    by_name = cli("status", "slurm-local", "--root", str(tmp_path / "runs"), "--json")
    assert json.loads(by_name.stdout)["run_dir"] == run_dir

    subprocess.run(["scancel", job_id], check=True)
    ended = wait_for(lambda: (v := status(cli, run_dir))["job"]["state"] == "ended" and v, what="ended")
    assert "CANCELLED" in ended["job"]["slurm_state"]
    assert ended["job"]["reason"] == "cancelled"  # the head caught SIGTERM and journaled it


def test_cells_layout_holds_each_cell_in_a_job_of_its_own_and_scancel_ends_them(cli, tmp_path: Path) -> None:
    launched = _launch(cli, tmp_path / "runs")
    job_id, run_dir = launched["job_id"], Path(launched["run_dir"])
    assert launched["layout"] == "cells"
    wait_for((run_dir / "nodes.json").exists, timeout=60, what="every cell job running")
    nodes = json.loads((run_dir / "nodes.json").read_text())
    cells = json.loads((run_dir / "cells.json").read_text())
    assert [c["cell"] for c in cells] == [0, 1, 2, 3] and len({c["job_id"] for c in cells} | {job_id}) == 5
    assert sorted(n for c in cells for n in c["nodes"]) == sorted(n["name"] for n in nodes if n["het_group"] == 1)
    view = status(cli, str(run_dir))
    jobs = view["job"]["components"]
    assert [c["id"] for c in jobs] == [job_id] + [c["job_id"] for c in cells]
    assert all(c["state"] == "RUNNING" for c in jobs) and [c.get("cell") for c in jobs[1:]] == [0, 1, 2, 3]

    subprocess.run(["scancel", job_id], check=True)
    ended = wait_for(lambda: (v := status(cli, str(run_dir)))["job"]["state"] == "ended" and v, what="ended")
    assert ended["job"]["reason"] == "cancelled"
    states = subprocess.run(["squeue", "-h", "-j", ",".join(c["job_id"] for c in cells), "-o", "%T"],
                            capture_output=True, text=True).stdout.split()
    assert "RUNNING" not in states, "the head cancels its cell jobs on its way out"


def test_at_the_time_limit_the_head_ends_first_and_resume_continues(cli, tmp_path: Path) -> None:
    # A 2-minute limit: the head stops itself 90 s before it (Slurm's USR2 warning reaches job
    # steps, not the batch script the head runs in) and says so.
    launched = _launch(cli, tmp_path / "runs", "--set", "cluster.time_limit=00:02:00",
                       "--set", "rollout.execution_time_limit_s=60")
    run_dir = launched["run_dir"]
    ended = wait_for(lambda: (v := status(cli, run_dir))["job"]["state"] == "ended" and v, timeout=150,
                     what="the head to stop before its time limit")
    assert ended["job"]["reason"] == "time_limit" and ended["job"]["slurm_state"] == "COMPLETED", ended["job"]
    resumed = cli("launch", "--resume", run_dir, "--json")
    assert resumed.returncode == 0, resumed.stderr
    again = json.loads(resumed.stdout)["job_id"]
    assert again != launched["job_id"]
    wait_for(lambda: status(cli, run_dir)["job"]["state"] == "running", timeout=60, what="the resumed head")
    assert cli("stop", run_dir).returncode == 0
    assert wait_for(lambda: (v := status(cli, run_dir))["job"]["state"] == "ended" and v,
                    what="stopped")["job"]["reason"] == "stopped"


def test_paths_with_spaces_and_quotes_submit_and_run(cli, tmp_path: Path) -> None:
    root = tmp_path / "my runs" / "it's \"quoted\""
    launched = _launch(cli, root, "--set", "run.name=quoted")
    run_dir = Path(launched["run_dir"])
    assert run_dir == root / "quoted"
    wait_for((run_dir / "nodes.json").exists, what="node table under a quoted path")
    assert cli("stop", str(run_dir)).returncode == 0
    ended = wait_for(lambda: (v := status(cli, str(run_dir)))["job"]["state"] == "ended" and v, what="stop")
    assert ended["job"]["reason"] == "stopped"


def test_sbatch_refusal_is_a_runtime_error(cli, tmp_path: Path) -> None:
    result = cli("launch", "configs/slurm-local.yaml", "--set", f"run.output_root={tmp_path}",
                 "--set", "cluster.partition=nosuchpartition")
    assert result.returncode == 1
    assert "sbatch refused" in result.stderr and "Traceback" not in result.stderr


def test_a_job_waiting_for_nodes_is_pending(cli, tmp_path: Path) -> None:
    first = _launch(cli, tmp_path / "runs", "--set", "run.name=first")
    # Once the first holds every node (its head and each cell's job), the second must wait.
    wait_for((Path(first["run_dir"]) / "nodes.json").exists, timeout=60, what="first job running")
    second = _launch(cli, tmp_path / "runs", "--set", "run.name=second")
    try:
        view = status(cli, second["run_dir"])
        assert view["job"]["state"] == "pending" and view["nodes"] == []
        assert "node table" in view["note"]
    finally:
        subprocess.run(["scancel", first["job_id"], second["job_id"]], check=True)
    wait_for(lambda: status(cli, second["run_dir"])["job"]["state"] == "ended", what="pending job cancelled")


def test_an_allocation_the_cluster_cannot_grant_is_refused_before_submission(cli, tmp_path: Path) -> None:
    wait_for(lambda: not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip(), timeout=60,
             what="earlier tests' jobs (and their cell jobs) to end")
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout
    result = cli("launch", "configs/slurm-local.yaml", "--set", f"run.output_root={tmp_path}",
                 "--set", "cluster.nodes=5")  # 5 workers + the head on a 5-node cluster
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "cluster.nodes" in result.stderr and "nothing was submitted" in result.stderr
    assert not (tmp_path / "slurm-local").exists()
    after = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout
    assert after == before
