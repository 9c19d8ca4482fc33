"""The local backend: every node is virtual and every step a process group on this machine.

It lets ``gyrectl launch`` run the whole loop on one machine (the embedded default) and gives the
rest of the system the same :class:`Cluster` interface as Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence

from gyrectl.cluster.base import HARNESS_GROUP, Cluster, Node, StepSpec, StepStatus
from gyrectl.cluster.processes import ProcessSteps, stop_owned
from gyrectl.config.schema import Config

HEAD_NODE = "local-head"


def virtual_nodes(config: Config) -> list[Node]:
    """The head plus ``cluster.nodes`` virtual workers, all on 127.0.0.1."""
    cluster = config.cluster
    head = Node(name=HEAD_NODE, het_group=0, gpus=0, cpus=cluster.head.cpus, address="127.0.0.1")
    workers = [Node(name=f"local-{i}", het_group=1, gpus=cluster.gpus_per_node, cpus=cluster.cpus_per_node,
                    address="127.0.0.1") for i in range(cluster.nodes)]
    return [head, *workers]


def virtual_harness_nodes(config: Config) -> list[Node]:
    """``cluster.harnesses.nodes`` virtual harness nodes, on 127.0.0.1 like the rest."""
    harnesses = config.cluster.harnesses
    return [Node(name=f"local-harness-{i}", het_group=HARNESS_GROUP, gpus=0, cpus=harnesses.cpus, address="127.0.0.1")
            for i in range(harnesses.nodes)]


class LocalCluster(Cluster):
    backend = "local"

    def __init__(self, config: Config, *, owner: str = ""):
        """``owner``: the run directory, which labels this head's steps (empty: unlabelled)."""
        self._nodes = virtual_nodes(config)
        self._harness_nodes = virtual_harness_nodes(config)
        self._steps = ProcessSteps(owner=owner)
        self._owner = owner
        self._count = 0

    def discover(self) -> Sequence[Node]:
        """The virtual nodes, once the steps an earlier head of the run left are gone (they stop
        themselves when their head dies; a resumed head starts servers on the same ports)."""
        if self._owner:
            stop_owned(self._owner)
        return list(self._nodes)

    def harness_nodes(self) -> Sequence[Node]:
        return list(self._harness_nodes)

    def start_step(self, spec: StepSpec) -> str:
        known = {n.name for n in [*self._nodes, *self._harness_nodes]}
        unknown = [n for n in spec.nodes if n not in known]
        assert not unknown, f"step {spec.name} names nodes outside the allocation: {unknown}"
        self._count += 1
        step_id = f"{self._count}-{spec.name}"
        env = {"GYRECTL_STEP_NODES": ",".join(spec.nodes), **spec.env}
        self._steps.start(step_id, spec.command, env=env, log_path=spec.log_path)
        return step_id

    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        self._steps.stop(step_id, grace_s=grace_s)

    def step_status(self, step_id: str) -> StepStatus:
        return self._steps.status(step_id)

    def close(self) -> None:
        self._steps.stop_all(grace_s=2.0)
