"""Harnesses on harness nodes: real harness agents (``python -m gyrectl.rollout.harness_agent``)
started as steps of the local backend's virtual harness nodes, real harness processes, the run
directory as the exchange. A node whose agent is killed outright is lost: its executions come
back to be run again elsewhere, recorded as infrastructure failures, never as finished."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from gyrectl.cluster.local.cluster import LocalCluster
from gyrectl.config.loader import parse_config
from gyrectl.coordinator.events import Finished
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.rollout.harness_nodes import ALIVE, ASSIGNED, RemoteHarnesses, node_folder
from gyrectl.rollout.harnesses import HarnessSettings
from gyrectl.rollout.live import live_rollouts
from gyrectl.rollout.sandbox import Sandbox
from gyrectl.rollout.tasks import Assignment, rerun_id
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import read_records

# Prints its task's answer and where it runs, then sleeps as long as its task says.
HARNESS = """
import json, os, socket, time
task = json.loads(os.environ["GYRECTL_TASK"])
print(json.dumps({"answer": task["answer"], "pid": os.getpid(), "cwd": os.getcwd()}), flush=True)
time.sleep(task.get("sleep", 0))
"""


@pytest.fixture
def setup(tmp_path: Path):
    launch_dir = tmp_path / "launch"
    launch_dir.mkdir()
    (launch_dir / "harness.py").write_text(HARNESS)
    run = RunDir.create(tmp_path / "runs", "r")
    cluster = LocalCluster(parse_config({"cluster": {"nodes": 1, "harnesses": {"nodes": 2}}}))
    settings = HarnessSettings(command=(sys.executable, str(launch_dir / "harness.py")), launch_dir=launch_dir,
                               env={"OPENAI_API_KEY": "key"}, time_limit_s=120.0, sandbox=Sandbox("none"),
                               keep_workdirs=True)
    harnesses = RemoteHarnesses(run=run, cluster=cluster, nodes=cluster.harness_nodes(), settings=settings,
                                silent_s=3.0, startup_s=60.0)
    yield run, cluster, harnesses
    harnesses.stop_all()
    cluster.close()


def _reap(harnesses: RemoteHarnesses, count: int, timeout: float = 60.0) -> list:
    ended, deadline = [], time.monotonic() + timeout
    while len(ended) < count:
        assert time.monotonic() < deadline, f"only {len(ended)} of {count} executions came back"
        ended += harnesses.reap()
        time.sleep(0.1)
    return ended


def _running(pid: int) -> bool:
    """The process exists and is no zombie (a harness whose agent died is reparented to a PID 1
    that may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _agent_pid(run: RunDir, node: str, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while not (node_folder(run, node) / ALIVE).exists():
        assert time.monotonic() < deadline, f"the agent of {node} never sent a heartbeat"
        time.sleep(0.1)
    return json.loads((node_folder(run, node) / ALIVE).read_text())["pid"]


def test_executions_run_on_the_harness_nodes_spread_over_them(setup):
    run, _, harnesses = setup
    for seq in range(4):
        harnesses.start(Assignment(f"e{seq:06d}", seq, {"id": "t", "answer": str(seq)}), base_url=f"http://gw/x/{seq}/v1")
    assert harnesses.num_running == 4
    ended = _reap(harnesses, 4)
    assert sorted(e.output["answer"] for e in ended) == ["0", "1", "2", "3"]
    assert all(not e.lost_on and e.exit_code == 0 and e.host == socket.gethostname() for e in ended)
    assert all(e.output["cwd"] == str(run.workdir(e.assignment.execution)) for e in ended)
    per_node = {node: [r["execution"] for r in read_records(node_folder(run, node) / ASSIGNED)]
                for node in ("local-harness-0", "local-harness-1")}
    assert sorted(map(len, per_node.values())) == [2, 2]  # the least busy node takes the next one
    assert harnesses.num_running == 0 and harnesses.reap() == []


def test_a_killed_harness_node_gives_its_executions_back_and_the_others_take_new_ones(setup):
    run, _, harnesses = setup
    for seq in range(4):
        harnesses.start(Assignment(f"e{seq:06d}", seq, {"id": "t", "answer": "1", "sleep": 60}), base_url="http://gw")
    victim = "local-harness-0"
    on_victim = {r["execution"] for r in read_records(node_folder(run, victim) / ASSIGNED)}
    pid = _agent_pid(run, victim)
    time.sleep(1.0)  # the agent has started its harnesses
    harness_pids = [json.loads(line)["pid"] for path in (run.logs_dir / "executions").glob("*.out")
                    if path.stem in on_victim for line in path.read_text().splitlines()[:1]]
    os.kill(pid, signal.SIGKILL)
    lost = _reap(harnesses, 2, timeout=30.0)
    assert {e.assignment.execution for e in lost} == on_victim and {e.lost_on for e in lost} == {victim}
    assert all(e.output is None and not e.timed_out for e in lost)
    time.sleep(0.5)
    assert len(harness_pids) == 2
    assert not any(_running(pid) for pid in harness_pids)  # they died with their agent: none calls the gateway
    harnesses.start(Assignment("e000004", 4, {"id": "t", "answer": "4"}), base_url="http://gw")
    [ended] = _reap(harnesses, 1)
    assert ended.assignment.execution == "e000004" and not ended.lost_on
    assert "e000004" in {r["execution"] for r in read_records(node_folder(run, "local-harness-1") / ASSIGNED)}


def test_a_node_whose_heartbeat_stops_is_lost(setup):
    """A crashed node's step may not end for a while (Slurm's SlurmdTimeout): silence is enough."""
    run, _, harnesses = setup
    harnesses.start(Assignment("e000000", 0, {"id": "t", "answer": "1", "sleep": 60}), base_url="http://gw")
    node = next(n for n in ("local-harness-0", "local-harness-1")
                if (node_folder(run, n) / ASSIGNED).exists() and (node_folder(run, n) / ASSIGNED).stat().st_size)
    os.kill(_agent_pid(run, node), signal.SIGSTOP)  # alive, silent
    [lost] = _reap(harnesses, 1, timeout=30.0)
    assert lost.lost_on == node


def test_with_every_harness_node_lost_the_run_says_so(setup):
    run, _, harnesses = setup
    for node in ("local-harness-0", "local-harness-1"):
        os.kill(_agent_pid(run, node), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        harnesses.reap()
        try:
            harnesses.start(Assignment("e000000", 0, {"id": "t", "answer": "1"}), base_url="http://gw")
        except Exception as exc:
            assert "every harness node was lost" in str(exc) and "--resume" in str(exc)
            break
        assert time.monotonic() < deadline, "start kept accepting executions with no harness node left"
        time.sleep(0.2)


def test_live_rollouts_run_a_lost_nodes_executions_again_under_new_ids(setup):
    run, _, harnesses = setup
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=("tiny",)), sink=None)  # no calls here
    first_run = []
    rollouts = live_rollouts(run=run, gateway=gateway, harnesses=harnesses,
                            tasks=[{"id": "slow", "answer": "12", "sleep": 3}], executions_per_task=4,
                            batch_executions=4, verifier=lambda task, output: 1.0, servers=[],
                            replicas_of=lambda cell, nodes: (), weight_sync=None)  # type: ignore[arg-type]
    try:
        rollouts.executions.dispatch(count=4, version=0)
        victim = "local-harness-1"
        first_run = sorted(r["execution"] for r in read_records(node_folder(run, victim) / ASSIGNED))
        os.kill(_agent_pid(run, victim), signal.SIGKILL)
        events, deadline = [], time.monotonic() + 60
        while sum(isinstance(e, Finished) for e in events) < 4:
            assert time.monotonic() < deadline, "the lost executions were not run again"
            events += rollouts.executions.poll()
            rollouts.clock.wait()
        rollouts.claims.claim(index=0, take=((0, 0, 4),))
        batch = json.loads(run.batch_file(0).read_text())
    finally:
        rollouts.close()
        gateway.close()
    assert sorted(e.seq for e in events if isinstance(e, Finished)) == [0, 1, 2, 3]  # each once
    records = [r for r in read_records(run.executions_file) if "status" in r]
    lost = [r for r in records if r.get("rerun")]
    assert sorted(r["execution"] for r in lost) == first_run and len(first_run) == 2
    assert all(r["status"] == "infra_failure" and r["reward"] is None and r["host"] == victim for r in lost)
    trained = sorted(e["execution"] for e in batch["executions"])
    assert trained == sorted([e for e in ("e000000", "e000001", "e000002", "e000003") if e not in first_run]
                             + [rerun_id(e) for e in first_run])
    assert batch["left_out"] == []  # the lost runs are neither trained nor counted as finished


def test_a_rerun_id_counts_the_runs():
    assert rerun_id("e000012") == "e000012-h1"
    assert rerun_id("e000012-h1") == "e000012-h2"
    assert rerun_id("e000012-r1") == "e000012-r1-h1"
    assert rerun_id("eval-v4-0003-h9") == "eval-v4-0003-h10"
