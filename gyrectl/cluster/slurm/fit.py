"""Whether a config's allocation can ever be granted by the cluster it is submitted to, decided
before anything is submitted: a job that asks for more nodes (or bigger ones) than its partition
has would otherwise wait in the queue forever, or be refused with Slurm's own terse words."""

from __future__ import annotations

from collections.abc import Sequence

from gyrectl.cluster.slurm.cli import PartitionNode
from gyrectl.config.schema import Config


def fit_problems(config: Config, nodes: Sequence[PartitionNode]) -> list[str]:
    """Why the allocation cannot fit, one message per field (empty: it fits). A partition Slurm
    does not know is left to sbatch, which names it in its refusal."""
    cluster = config.cluster
    worker_partition = _resolve(cluster.partition, nodes)
    head_partition = _resolve(cluster.head.partition or cluster.partition, nodes)
    if worker_partition is None or head_partition is None:
        return []
    problems = []
    workers = [n for n in nodes if n.partition == worker_partition and n.cpus >= cluster.cpus_per_node
               and n.gpus >= cluster.gpus_per_node and n.mem_mb >= cluster.mem_per_node_gb * 1000]
    heads = [n for n in nodes if n.partition == head_partition and n.cpus >= cluster.head.cpus
             and n.mem_mb >= cluster.head.mem_gb * 1000]
    size = (f"{cluster.cpus_per_node} CPUs, {cluster.gpus_per_node} GPUs"
            + (f", {cluster.mem_per_node_gb} GB" if cluster.mem_per_node_gb else ""))
    if len(workers) < cluster.nodes:
        problems.append(f"cluster.nodes: {cluster.nodes} worker nodes of {size} asked for, but partition "
                        f"{worker_partition!r} has {len(workers)} such node(s)")
    elif not heads:
        problems.append(f"cluster.head.cpus: no node of partition {head_partition!r} has {cluster.head.cpus} CPUs"
                        + (f" and {cluster.head.mem_gb} GB" if cluster.head.mem_gb else "") + " for the head")
    elif len({n.name for n in workers} | {n.name for n in heads}) < cluster.nodes + 1:
        # the head component never shares a node with the workers of the same job
        problems.append(f"cluster.nodes: {cluster.nodes} worker nodes and the head need {cluster.nodes + 1} "
                        f"distinct nodes, but partition {worker_partition!r} has {len(workers)} that fit")
    return problems + _harness_problems(config, nodes)


def _harness_problems(config: Config, nodes: Sequence[PartitionNode]) -> list[str]:
    harnesses = config.cluster.harnesses
    partition = _resolve(harnesses.partition or config.cluster.partition, nodes)
    if not harnesses.nodes or partition is None:
        return []
    fitting = [n for n in nodes if n.partition == partition and n.cpus >= harnesses.cpus
               and n.mem_mb >= harnesses.mem_gb * 1000]
    if len(fitting) >= harnesses.nodes:
        return []
    return [f"cluster.harnesses.nodes: {harnesses.nodes} harness nodes of {harnesses.cpus} CPUs asked for, but "
            f"partition {partition!r} has {len(fitting)} such node(s)"]


def _resolve(partition: str, nodes: Sequence[PartitionNode]) -> str | None:
    names = {n.partition for n in nodes}
    if partition:
        return partition if partition in names else None
    return next((n.partition for n in nodes if n.default), None)
