"""Where a cell's vLLM engines run and answer: one replica per GPU group, or one engine across nodes.

A cell's server step runs on every node of the cell. How many engines that makes is the config's
arithmetic (:mod:`gyrectl.config.placement`); here each becomes a replica with a place:

    no GPUs (CPU nodes)        one replica per node
    G <= gpus_per_node         gpus_per_node / G replicas per node, each on its own GPU group
                               (a slot: GPUs slot*G .. slot*G+G-1) and its own port (base + slot)
    G >  gpus_per_node         one engine per G / gpus_per_node nodes, started with vLLM's own
                               multi-node launch; only its first node takes HTTP calls

Every replica is routed, drained, put to sleep, woken and synced on its own; the gateway knows it
by its :attr:`Replica.name`: ``cell3`` when the cell has one replica (the name a one-replica cell
always had), ``cell3.0``, ``cell3.1``, ... otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from gyrectl.config.placement import nodes_per_engine, replicas_per_node
from gyrectl.config.schema import Config


@dataclass(frozen=True)
class Replica:
    cell: int
    index: int
    """Its place among the cell's replicas."""
    node: str
    """The node whose address it answers on (a multi-node engine's first node)."""
    slot: int
    """Its GPU group on that node (0 on CPU nodes and for a multi-node engine)."""
    name: str
    """Its name in the gateway pool, ``servers.json`` and logs."""


@dataclass(frozen=True)
class CellServer:
    """A replica as the gateway reaches it."""

    name: str
    """Its name in the gateway pool (:attr:`Replica.name`)."""
    url: str
    node: str = ""
    """The node it answers on."""


def cell_replicas(config: Config, *, cell: int, nodes: tuple[str, ...]) -> tuple[Replica, ...]:
    """The replicas of ``cell`` on ``nodes`` (in node order, then slot)."""
    span = nodes_per_engine(config)
    places = [(node, slot) for node in nodes[::span] for slot in range(max(replicas_per_node(config), 1))]
    single = len(places) == 1
    return tuple(Replica(cell=cell, index=i, node=node, slot=slot, name=f"cell{cell}" if single else f"cell{cell}.{i}")
                 for i, (node, slot) in enumerate(places))
