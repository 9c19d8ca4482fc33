"""The two kinds of step the coordinator starts on a cell, as ``StepSpec``s: a rollout server and
a training member (one per cell; members of one training step join the same rendezvous, so the
step grows when a cell joins). The environment tells the step its role.
This is the coordinator's ``StepBuilder`` port filled with the engines' command lines (vLLM,
torchrun + ``gyrectl.train``); the coordinator never imports it, launch wires it (the simulator
builds steps of its own, :mod:`gyrectl.sim.steps`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from gyrectl.cluster.backend import backend_for
from gyrectl.cluster.base import Node, StepSpec
from gyrectl.config.placement import replicas_per_node
from gyrectl.config.schema import Config
from gyrectl.coordinator.ports import batch_name
from gyrectl.coordinator.recovery import MAX_TRAIN_ATTEMPTS
from gyrectl.rollout.replicas import CellServer, cell_replicas
from gyrectl.rollout.server import rollout_server, server_url
from gyrectl.run.rundir import RunDir


@dataclass(frozen=True)
class StepFactory:
    config: Config
    """Shapes each cell's vLLM server (``gyrectl.rollout.server``)."""
    run: RunDir
    """Where the weights a server starts with live (``checkpoints/vN``) and its log goes."""
    gpus_per_node: int
    cpus_per_node: int
    server_key: str = ""
    """The key every server is locked with (``RunDir.server_key``; empty without a run directory)."""

    def rollout(self, *, cell: int, nodes: tuple[str, ...], version: int) -> StepSpec:
        """Cell ``cell``'s server step: every replica of the cell (:mod:`gyrectl.rollout.replicas`),
        one task each, or one task per node of a multi-node engine."""
        server = rollout_server(self.config, cell=cell, weights_dir=self.run.weights_dir(version),
                                server_key=self.server_key, nodes=nodes)
        env = {**server.env, **self._run_env, "GYRECTL_ROLE": "rollout", "GYRECTL_CELL": str(cell),
               "GYRECTL_WEIGHTS_VERSION": str(version)}
        name = f"rollout-cell{cell}"
        return StepSpec(name=name, nodes=nodes, command=server.command, env=env, cpus_per_node=self.cpus_per_node,
                        gpus_per_node=self.gpus_per_node, overlap=self._overlap,
                        tasks_per_node=max(replicas_per_node(self.config), 1),
                        log_path=self.run.logs_dir / f"{name}.log")

    @property
    def _run_env(self) -> dict[str, str]:
        """The run every process of a step belongs to, inherited by all it starts (vLLM's engine
        core, torchrun's workers): what finds them, in a test or by hand (``/proc/PID/environ``)."""
        return {"GYRECTL_RUN_DIR": str(self.run.path.resolve())}

    @property
    def _overlap(self) -> bool:
        """A cell's steps share its nodes when a server sleeps beside a training member, or a
        resident trainer waits beside a server (either may start second)."""
        return self.config.rollout.sleep_level > 0 or self.config.training.resident

    def replicas(self, *, cell: int, nodes: Sequence[Node]) -> tuple[CellServer, ...]:
        """Cell ``cell``'s server replicas on ``nodes``, each with the URL the gateway reaches it at."""
        address = {node.name: node.address for node in nodes}
        return tuple(CellServer(name=r.name, url=server_url(self.config, cell=cell, address=address[r.node],
                                                            slot=r.slot), node=r.node)
                     for r in cell_replicas(self.config, cell=cell, nodes=tuple(node.name for node in nodes)))

    def train_member(self, *, cell: int, nodes: tuple[str, ...], index: int, members: int, rendezvous_host: str,
                     attempt: int = 0, group: str = "") -> StepSpec:
        """Cell ``cell``'s part of training step ``index``, one of ``members`` member cells that
        all meet at ``rendezvous_host`` (a node of the step's first cell); ``attempt`` counts the
        step's runs after a failure (each gets a fresh rendezvous). With a ``group`` id the member
        is resident (:mod:`gyrectl.train.resident`): it stays up for the steps requested of it."""
        env = {**self._run_env, "GYRECTL_ROLE": "train", "GYRECTL_CELL": str(cell), "GYRECTL_TRAIN_STEP": str(index),
               "GYRECTL_BATCH": batch_name(index)}
        if group:
            env |= {"GYRECTL_TRAINER_RESIDENT": "1", "GYRECTL_TRAINER_GROUP": group}
        name = f"train-step{index}-cell{cell}"
        command = self._torchrun(index, attempt=attempt, members=members, rendezvous_host=rendezvous_host,
                                 resident=bool(group))
        return StepSpec(name=name, nodes=nodes, command=command, env=env,
                        cpus_per_node=self.cpus_per_node, gpus_per_node=self.gpus_per_node,
                        overlap=self._overlap, log_path=self.run.logs_dir / f"{name}.log")

    def _torchrun(self, index: int, *, attempt: int, members: int, rendezvous_host: str,
                  resident: bool) -> tuple[str, ...]:
        """One torchrun agent per member cell (``nodes_per_cell`` nodes each), all joining step
        ``index``'s rendezvous, whose size is fixed when the step starts (torchrun's re-rendezvous
        when a node joins a running group was seen to time out). The trainer is idempotent per
        step (it starts over from ``checkpoints/v{index}``), so a restarted member loses nothing
        but time. A resident member is never restarted by torchrun: a restarted worker would come
        back as a one-shot trainer of step ``index`` while the coordinator asks the group for
        later steps, so a member whose worker died exits, and the coordinator releases the group
        (or retries the step it was training). ``gyrectl.train.torchrun`` is torchrun that exits
        quietly when the coordinator stops the member (SIGTERM), where torchrun's own agent ends
        in a traceback."""
        cluster = self.config.cluster
        host = backend_for(self.config).rendezvous_host(rendezvous_host)
        num_nodes = members * self.config.cells.nodes_per_cell
        return (sys.executable, "-m", "gyrectl.train.torchrun", f"--nnodes={num_nodes}",
                f"--nproc-per-node={max(cluster.gpus_per_node, 1)}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={host}:{rendezvous_port(self.config, index, attempt)}",
                f"--rdzv-id={self.run.name}-step{index}-try{attempt}", f"--max-restarts={0 if resident else 1}",
                "-m", "gyrectl.train", "--run-dir", str(self.run.path), "--step", str(index))


def rendezvous_port(config: Config, index: int, attempt: int = 0) -> int:
    """A port per run of a training step, above the cells' server ports: a rendezvous never meets
    the store of the previous step (or of a killed attempt) still closing on the same port."""
    return config.rollout.server_port + 1000 + (index * MAX_TRAIN_ATTEMPTS + attempt) % 1000


def step_factory(config: Config, run: RunDir | None = None) -> StepFactory:
    """Steps for the run in ``run`` (default: the directory the config names, and no server key;
    a real coordinator passes its ``RunDir``): each cell's vLLM server, and the
    trainer entrypoint run by torchrun with an elastic node range."""
    return StepFactory(config=config, run=run or RunDir.of(config),
                       gpus_per_node=config.cluster.gpus_per_node, cpus_per_node=config.cluster.cpus_per_node,
                       server_key=run.server_key() if run is not None else "")
