"""How a config's GPUs make server engines: arithmetic over the config alone, shared by the
server launch (``gyrectl.rollout.replicas``), the memory plan and the backends' checks.

    G = tensor_parallel x pipeline_parallel GPUs per engine
    no GPUs (CPU nodes)        one replica per node
    G <= gpus_per_node         gpus_per_node / G replicas per node
    G >  gpus_per_node         one engine per G / gpus_per_node nodes
"""

from __future__ import annotations

from gyrectl.config.schema import Config


def engine_gpus(config: Config) -> int:
    return config.model.tensor_parallel * config.model.pipeline_parallel


def replicas_per_node(config: Config) -> int:
    """Replicas on each node; 0 when one engine spans several nodes."""
    gpus = config.cluster.gpus_per_node
    return 1 if gpus == 0 else gpus // engine_gpus(config)


def nodes_per_engine(config: Config) -> int:
    """Nodes one engine spans: 1 unless an engine needs more GPUs than a node has."""
    gpus = config.cluster.gpus_per_node
    return 1 if gpus == 0 or engine_gpus(config) <= gpus else engine_gpus(config) // gpus


def replicas_per_cell(config: Config) -> int:
    return config.cells.nodes_per_cell // nodes_per_engine(config) * max(replicas_per_node(config), 1)
