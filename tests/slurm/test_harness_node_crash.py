"""Agent harnesses on harness nodes of their own (``cluster.harnesses.nodes``) on the test cluster:
the head on node1 keeps the coordinator, gateway and journal, two cells serve and train, and two
harness nodes, each an exclusive job of its own, run every harness through their agents, reaching
the head's gateway over the nodes' network.

Mid-run, a harness node with executions running crashes (kill -9 of every process in its network
namespace). The head hears no heartbeat from it, records its executions as infrastructure
failures (never trained) and runs them again on the other harness node; the run trains all its
steps.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from gyrectl.coordinator.events import TrainEnded

from runs import (
    batches,
    crash_node,
    events,
    execution_records,
    idle_nodes,
    launch_loop,
    status,
    wait_for,
    wait_until_ended,
)

pytestmark = [pytest.mark.usefixtures("slurm_cluster"), pytest.mark.vllm, pytest.mark.loop, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
STEPS = 3


def _running_on(run_dir: Path, node: str) -> int:
    try:
        return json.loads((run_dir / "harness-nodes" / node / "alive.json").read_text())["running"]
    except (OSError, ValueError, KeyError):
        return 0


@pytest.fixture(scope="module")
def harness_run(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    wait_for(lambda: idle_nodes() == 5, timeout=120, what="an idle cluster")
    run_dir = launch_loop(cli, root=tmp_path_factory.mktemp("runs"), model=tiny_model_dir, name="harness-nodes",
                          extra=("--set", f"run.steps={STEPS}", "--set", "cluster.harnesses.nodes=2",
                                 "--set", "rollout.execution_time_limit_s=400"))
    view = wait_for(lambda: (v := status(cli, run_dir))["steps"] and v, timeout=600, what="a trained step")
    harness_nodes = [n["name"] for n in view["nodes"] if n["role"] == "harnesses"]
    victim = wait_for(lambda: next((n for n in harness_nodes if _running_on(run_dir, n) > 0), None),
                      timeout=300, what="executions running on a harness node")
    crashed_at = time.time()
    crash_node(victim)
    try:
        lost = wait_for(lambda: [r for r in execution_records(run_dir) if r.get("rerun")], timeout=120,
                        what="the crashed node's executions to be given up")
    finally:
        subprocess.run(["bash", str(REPO / "tests/slurm/up.sh")], check=True, capture_output=True)  # the node returns
    final = wait_until_ended(cli, run_dir, timeout=1500)
    return {"run_dir": run_dir, "view": view, "harness_nodes": harness_nodes, "victim": victim,
            "crashed_at": crashed_at, "lost": lost, "final": final}


def test_every_harness_runs_on_a_harness_node_and_the_run_trains(harness_run) -> None:
    run_dir, final, harness_nodes = harness_run["run_dir"], harness_run["final"], harness_run["harness_nodes"]
    assert (final["job"]["reason"], len(final["steps"])) == ("completed", STEPS), final["job"]
    head = next(n["name"] for n in harness_run["view"]["nodes"] if n["role"] == "coordinator")
    assert len(harness_nodes) == 2 and head not in harness_nodes
    records = execution_records(run_dir)
    # Each record names the host its harness ran on (the agent's hostname: the node's own namespace).
    assert records and {r["host"] for r in records} <= set(harness_nodes), {r["host"] for r in records}
    assert [e.index for e in events(run_dir) if isinstance(e, TrainEnded)] == list(range(STEPS))
    for node in harness_nodes:  # each agent took executions through the run directory
        assert (run_dir / "harness-nodes" / node / "assigned.jsonl").stat().st_size > 0


def test_a_crashed_harness_nodes_executions_run_again_elsewhere_and_are_never_trained(harness_run) -> None:
    run_dir, victim, lost = harness_run["run_dir"], harness_run["victim"], harness_run["lost"]
    assert {r["host"] for r in lost} == {victim}
    assert all(r["status"] == "infra_failure" and r["reward"] is None for r in lost)
    assert min(r["ended_at"] for r in lost) - harness_run["crashed_at"] < 60, "noticed from the heartbeat"
    records = {r["execution"]: r for r in execution_records(run_dir)}
    for gone in lost:  # the same sequence number ran to the end under its new id, on the other node
        again = records[gone["rerun"]]
        assert again["seq"] == gone["seq"] and again["host"] != victim
    trained = [e for step in batches(run_dir).values() for e in step]
    assert len(trained) == len(set(trained)) and not {r["execution"] for r in lost} & set(trained)
