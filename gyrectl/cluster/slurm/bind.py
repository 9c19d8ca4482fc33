"""Runs a server command with ``--host`` set to the address of the node it runs on, so a rollout
server listens on the node's cluster address only, never on every interface.

    python -m gyrectl.cluster.slurm.bind PYTHON -m vllm.entrypoints.openai.api_server --model ...

One command serves every node of a step (``srun --ntasks=<nodes>``), so the address can only be
looked up on the node: it is the ``NodeAddr`` Slurm holds for ``$SLURMD_NODENAME``, the same
address the head gives the gateway (``slurm.node_address``). ``--host`` goes last, so it wins over
a ``host`` in ``rollout.engine_args``: the gateway could not reach any other.
"""

from __future__ import annotations

import os
import sys

from gyrectl.cluster.slurm.hetjob import node_address
from gyrectl.errors import RuntimeFailure


def bound(command: list[str], node: str) -> list[str]:
    return [*command, "--host", node_address(node)]


def main(argv: list[str]) -> None:
    node = os.environ.get("SLURMD_NODENAME", "")
    if not argv or not node:
        sys.exit("usage: python -m gyrectl.cluster.slurm.bind COMMAND... (inside a Slurm step)")
    try:
        command = bound(argv, node)
    except RuntimeFailure as exc:
        sys.exit(f"cannot find the address of node {node}: {exc}")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
