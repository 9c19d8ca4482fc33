"""Runs a server command as this task of its step: bound to its node's address, and made the
replica or the engine rank this task is.

    python -m gyrectl.cluster.slurm.bind [OPTIONS --] PYTHON -m vllm.entrypoints.openai.api_server --model ...

One command serves every task of a step (``srun --ntasks=...``), so what differs per task is
settled here, on the node:

- ``--host``: the ``NodeAddr`` Slurm holds for ``$SLURMD_NODENAME``, the same address the head
  gives the gateway (``slurm.node_address``). It goes last, so it wins over a ``host`` in
  ``rollout.engine_args``: the gateway could not reach any other.
- ``--slot-gpus G`` (several replicas per node): task ``$SLURM_LOCALID`` = slot s serves on GPUs
  s*G .. s*G+G-1 of the node's (``CUDA_VISIBLE_DEVICES``) and on port ``--port`` + s.
- ``--nodes-per-engine N --cell-nodes A,B,.. --master-port P`` (an engine needs more GPUs than a
  node has): the cell's nodes in groups of N, one engine per group, started with vLLM's own
  multi-node launch (the multiprocessing executor: ``--nnodes N --node-rank R --master-addr
  FIRST --master-port P``). The group's first node runs the API server; the others run
  ``vllm serve --headless`` (no HTTP, workers of the first node's engine). Ray's launch is the
  other way vLLM offers; it needs a Ray cluster started inside the Slurm step first, and a
  package gyrectl does not otherwise install.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from gyrectl.errors import RuntimeFailure

API_SERVER = ("-m", "vllm.entrypoints.openai.api_server")
HEADLESS = ("-m", "vllm.entrypoints.cli.main", "serve", "--headless")


def bind_options(*, slot_gpus: int = 0, nodes_per_engine: int = 1, cell_nodes: Sequence[str] = (),
                 master_port: int = 0) -> tuple[str, ...]:
    """The options before ``--`` (none for one server per node)."""
    options: tuple[str, ...] = ()
    if slot_gpus:
        options += ("--slot-gpus", str(slot_gpus))
    if nodes_per_engine > 1:
        options += ("--nodes-per-engine", str(nodes_per_engine), "--cell-nodes", ",".join(cell_nodes),
                    "--master-port", str(master_port))
    return (*options, "--") if options else ()


def task_command(command: Sequence[str], options: Mapping[str, str], *, node: str, address_of,
                 local_id: int, visible_gpus: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) of this task: ``command`` made the replica or rank that ``node``
    (this task's node) and ``local_id`` (its index on the node) are; ``address_of(node)`` looks
    a node's address up."""
    argv, env = list(command), {}
    slot_gpus = int(options.get("--slot-gpus", "0"))
    if slot_gpus:
        mine = list(visible_gpus)[local_id * slot_gpus:(local_id + 1) * slot_gpus]
        if len(mine) < slot_gpus:
            raise RuntimeFailure(f"task {local_id} on {node} needs GPUs {local_id * slot_gpus}.."
                                 f"{(local_id + 1) * slot_gpus - 1} but the node shows {len(visible_gpus)}")
        env["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
        argv += ["--port", str(_port(argv) + local_id)]
    span = int(options.get("--nodes-per-engine", "1"))
    if span > 1:
        cell_nodes = options["--cell-nodes"].split(",")
        position = cell_nodes.index(node)
        group = cell_nodes[position - position % span:][:span]
        rank = position % span
        argv += ["--nnodes", str(span), "--node-rank", str(rank), "--master-addr", address_of(group[0]),
                 "--master-port", options["--master-port"]]
        if rank > 0:
            argv = _headless(argv)
    return [*argv, "--host", address_of(node)], env


def _port(argv: Sequence[str]) -> int:
    ports = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--port"]
    return int(ports[-1])  # argparse keeps the last


def _headless(argv: list[str]) -> list[str]:
    for i in range(len(argv) - 1):
        if tuple(argv[i:i + 2]) == API_SERVER:
            return [*argv[:i], *HEADLESS, *argv[i + 2:]]
    raise RuntimeFailure(f"not a vLLM API server command: {' '.join(argv[:4])} ...")


def split_options(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """(options, command): the options end at ``--``; without it everything is the command."""
    if "--" not in argv or not argv or not argv[0].startswith("--"):
        return {}, list(argv)
    cut = list(argv).index("--")
    head = argv[:cut]
    return dict(zip(head[::2], head[1::2], strict=False)), list(argv[cut + 1:])


def main(argv: list[str]) -> None:
    from gyrectl.cluster.slurm.hetjob import node_address

    node = os.environ.get("SLURMD_NODENAME", "")
    options, command = split_options(argv)
    if not command or not node:
        sys.exit("usage: python -m gyrectl.cluster.slurm.bind [OPTIONS --] COMMAND... (inside a Slurm step)")
    local_id = int(os.environ.get("SLURM_LOCALID", "0"))
    visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    if not visible:  # Slurm did not restrict the GPUs: the node's, by index
        visible = [str(i) for i in range((local_id + 1) * int(options.get("--slot-gpus", "0")))]
    try:
        command, env = task_command(command, options, node=node, address_of=node_address, local_id=local_id,
                                    visible_gpus=visible)
    except RuntimeFailure as exc:
        sys.exit(f"cannot start this task of the server step on node {node}: {exc}")
    os.environ.update(env)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
