"""An allocation the cluster can never grant is refused before submission, naming the field."""

from __future__ import annotations

from gyrectl.cluster.slurm.cli import PartitionNode
from gyrectl.cluster.slurm.fit import fit_problems
from gyrectl.config.loader import parse_config


def _config(**cluster):
    return parse_config({"cluster": {"backend": "slurm", "partition": "gpu", "nodes": 2, "cpus_per_node": 8,
                                     "gpus_per_node": 4, **cluster}})


def _nodes(partition: str, count: int, *, cpus: int = 8, gpus: int = 4, default: bool = False, first: int = 0):
    return [PartitionNode(partition, f"{partition}{i}", cpus, gpus, 64000, default)
            for i in range(first, first + count)]


def test_a_partition_with_room_fits() -> None:
    assert fit_problems(_config(), _nodes("gpu", 3)) == []


def test_too_few_nodes_names_cluster_nodes() -> None:
    (problem,) = fit_problems(_config(nodes=4), _nodes("gpu", 3))
    assert problem.startswith("cluster.nodes:") and "'gpu' has 3 such node(s)" in problem


def test_nodes_too_small_do_not_count() -> None:
    (problem,) = fit_problems(_config(), _nodes("gpu", 4, gpus=2))
    assert "4 GPUs" in problem and "has 0 such node(s)" in problem


def test_the_head_needs_a_node_of_its_own() -> None:
    (problem,) = fit_problems(_config(), _nodes("gpu", 2))
    assert "need 3 distinct nodes" in problem
    head_elsewhere = {"head": {"partition": "cpu", "cpus": 2}}
    assert fit_problems(_config(**head_elsewhere), _nodes("gpu", 2) + _nodes("cpu", 1, cpus=4, gpus=0)) == []


def test_a_head_too_big_for_every_node_names_head_cpus() -> None:
    (problem,) = fit_problems(_config(head={"cpus": 16}), _nodes("gpu", 3))
    assert problem.startswith("cluster.head.cpus:")


def test_the_default_partition_is_used_when_none_is_named() -> None:
    nodes = _nodes("other", 1) + _nodes("gpu", 3, default=True, first=5)
    assert fit_problems(_config(partition=""), nodes) == []
    assert fit_problems(_config(partition="", nodes=3), nodes)


def test_an_unknown_partition_is_left_to_sbatch() -> None:
    assert fit_problems(_config(partition="nosuch"), _nodes("gpu", 1)) == []


def test_harness_nodes_must_fit_their_partition() -> None:
    harnesses = {"harnesses": {"nodes": 3, "cpus": 32, "partition": "cpu"}}
    cpus = _nodes("cpu", 4, cpus=32, gpus=0)
    assert fit_problems(_config(**harnesses), _nodes("gpu", 3) + cpus) == []
    (problem,) = fit_problems(_config(**harnesses), _nodes("gpu", 3) + cpus[:2])
    assert problem.startswith("cluster.harnesses.nodes: 3 harness nodes of 32 CPUs") and "'cpu' has 2" in problem
    (small,) = fit_problems(_config(**harnesses), _nodes("gpu", 3) + _nodes("cpu", 4, cpus=16, gpus=0))
    assert "has 0 such node(s)" in small
