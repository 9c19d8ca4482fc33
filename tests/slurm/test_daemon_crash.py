"""A slurmd dies (kill -9 of the daemon only, not a node crash): the steps on its node keep
running, Slurm marks the node down after SlurmdTimeout and requeues the job; the requeued head
takes the run over from its journal, and the run completes with nothing lost. The coordinator's
node table matches Slurm's view of the job. Run in the ``hetjob`` layout, whose answer to a lost
node is Slurm's requeue (test_node_crash.py drills the ``cells`` layout)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from gyrectl.coordinator.events import Resumed, TrainEnded

from runs import batches, events, launch_loop, status, wait_for, wait_until_ended

pytestmark = [pytest.mark.usefixtures("slurm_cluster"), pytest.mark.vllm, pytest.mark.loop, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
LAB = Path(os.environ.get("LAB", REPO / ".slurmlab"))
STEPS = 3


def _node_state(node: str) -> str:
    return subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def survived(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    run_dir = launch_loop(cli, root=tmp_path_factory.mktemp("runs"), model=tiny_model_dir, name="daemon",
                          extra=("--set", "cluster.layout=hetjob"))
    view = wait_for(lambda: (v := status(cli, run_dir))["steps"] and v["executions"]["in_flight"] > 0 and v,
                    timeout=600, what="a trained step and executions in flight")
    victim = next(c["nodes"][0] for c in view["cells"] if c["phase"] == "rollout")
    os.kill(int((LAB / "run" / f"slurmd-{victim}.pid").read_text()), signal.SIGKILL)
    try:
        wait_for(lambda: "down" in _node_state(victim), timeout=120, what=f"Slurm to mark {victim} down")
    finally:
        subprocess.run(["bash", str(REPO / "tests/slurm/up.sh")], check=True, capture_output=True)  # slurmd back
    final = wait_until_ended(cli, run_dir, timeout=1200)
    return {"run_dir": run_dir, "victim": victim, "final": final}


def test_the_requeued_head_takes_the_run_over_and_completes_it(survived) -> None:
    run_dir, final = survived["run_dir"], survived["final"]
    assert (final["job"]["reason"], len(final["steps"])) == ("completed", STEPS), final["job"]
    journal = events(run_dir)
    assert any(isinstance(e, Resumed) for e in journal), "the job was requeued and its head resumed"
    assert [e.index for e in journal if isinstance(e, TrainEnded)] == list(range(STEPS))
    trained = [e for step in batches(run_dir).values() for e in step]
    assert len(trained) == len(set(trained)) == STEPS * final["executions"]["trained"] // STEPS


def test_the_node_table_matches_slurms_view_of_the_job(survived) -> None:
    final = survived["final"]
    slurm_nodes = set()
    for component in final["job"]["components"]:
        names = subprocess.run(["scontrol", "show", "hostnames", component["nodes"]], capture_output=True,
                               text=True).stdout.split()
        slurm_nodes.update(names)
    assert {n["name"] for n in final["nodes"]} == slurm_nodes
