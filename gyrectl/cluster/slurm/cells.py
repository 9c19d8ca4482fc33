"""The Slurm backend of the ``cells`` layout: the head (coordinator, gateway, agent harnesses) runs
in a job of its own and submits one job per cell through submitit, so a crashed node ends one cell
job (Slurm: ``NODE_FAIL``), not the head and its running harnesses.

A cell job's batch script only holds the allocation (:func:`hold_cell`) while the head's job runs;
the head starts the role steps in it with ``srun --jobid=CELLJOB``. A cell is *lost* once Slurm sees
its job end or one of its nodes stop responding, or at once when one of its steps ends on its own
and its node's slurmd no longer takes a connection (Slurm needs ``SlurmdTimeout`` to notice; a
training step retried on a dead node in that window would fail every attempt). Its replacement
is a new job, which starts when the partition has nodes again (the crashed node back, or another
one). Which job holds which cell is written to ``cells.json`` for ``gyrectl status``.

Harness nodes (``cluster.harnesses.nodes``) are held the same way, one job each; the head starts a
harness agent step in each (:mod:`gyrectl.rollout.harness_nodes` watches it).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gyrectl.cluster.base import HARNESS_GROUP, Node, StepState, StepStatus
from gyrectl.cluster.slurm.cli import failed_nodes, job_nodes, job_states, run_slurm, show_node, slurmd_port
from gyrectl.cluster.slurm.hetjob import SlurmCluster, discover_allocation, node_address
from gyrectl.cluster.slurm.sbatch import cell_parameters, harness_parameters
from gyrectl.config.schema import Config
from gyrectl.errors import GyreError, RuntimeFailure
from gyrectl.run.rundir import RunDir

POLL_S = 2.0
"""How often Slurm is asked about the cell jobs and their nodes (squeue and sinfo each time)."""
HOLD_POLL_S = 10.0
"""How often a cell job's batch script checks that the head still runs."""
PROBE_TIMEOUT_S = 2.0
"""How long a node's slurmd may take to accept a connection before the node counts as gone."""
_WAITING = (None, "PENDING", "CONFIGURING")
"""States of a cell job not running yet (None: squeue does not list it yet)."""
HEAD_MISSES = 3
"""Answers in a row without the head's job before a cell job lets its nodes go (one missing
answer may be a controller hiccup)."""


def hold_cell(head_job_id: str) -> None:
    """A cell job's batch script (run by submitit on the cell's first node): holds the nodes for
    the head's steps until the head's job no longer runs, so a head killed without cleaning up
    (kill -9, a crashed head node) leaves no allocation behind."""
    misses = 0
    while misses < HEAD_MISSES:
        try:
            state = job_states([head_job_id]).get(head_job_id)
        except GyreError:
            state = None
        if state is not None and state != "RUNNING":
            return
        misses = misses + 1 if state is None else 0
        time.sleep(HOLD_POLL_S)


@dataclass(frozen=True)
class CellJob:
    job_id: str
    nodes: tuple[Node, ...] = ()
    """Empty while the job waits for nodes."""


class SlurmCellsCluster(SlurmCluster):
    """Cells as jobs of their own; the head's job holds only the head."""

    def __init__(self, config: Config, run: RunDir, env: Mapping[str, str] | None = None):
        super().__init__(env)
        self._config, self._run = config, run
        self._cells: list[CellJob] = []
        self._harness_jobs: list[CellJob] = []
        """``cluster.harnesses.nodes`` jobs of one CPU node each, held like the cells' (the head
        starts a harness agent step in each); a lost one is not replaced."""
        self._asked: dict[int, CellJob] = {}
        """Replacement jobs asked for lost cells, not yet running."""
        self._lost: set[int] = set()
        self._unreachable: set[int] = set()
        """Cells a step of which ended on its own while their slurmd took no connection."""
        self._probed: set[str] = set()
        self._slurmd: dict[str, tuple[str, int]] = {}
        """Where each cell node's slurmd listens (read while the node is up)."""
        self._next_poll = 0.0
        self._next_ask: dict[int, float] = {}

    def discover(self) -> Sequence[Node]:
        """The head's node, then each cell's nodes, in cell order, once every cell job (and every
        harness node's job) runs."""
        head = discover_allocation(self._env)
        self._cells = [self._submit(cell_parameters(self._config, cell=cell), f"cell {cell}")
                       for cell in range(self._config.num_cells)]
        self._harness_jobs = [self._submit(harness_parameters(self._config, index=index), f"harness node {index}")
                              for index in range(self._config.cluster.harnesses.nodes)]
        self._write_cells()  # status shows the cell jobs while they wait
        self._cells = [self._await_nodes(job) for job in self._cells]
        self._harness_jobs = [self._await_nodes(job, het_group=HARNESS_GROUP) for job in self._harness_jobs]
        self._write_cells()
        return [*head, *(node for cell in self._cells for node in cell.nodes)]

    def harness_nodes(self) -> Sequence[Node]:
        return [node for job in self._harness_jobs for node in job.nodes]

    def _target(self, nodes: Sequence[str]) -> tuple[str, str]:
        job = next(held.job_id for held in [*self._cells, *self._harness_jobs]
                   if nodes[0] in {node.name for node in held.nodes})
        return f"--jobid={job}", job

    def step_status(self, step_id: str) -> StepStatus:
        status = super().step_status(step_id)
        if status.state in (StepState.FAILED, StepState.SUCCEEDED) and step_id not in self._probed:
            self._probed.add(step_id)  # srun of a crashed node's step may even exit 0
            cell = self._cell_of(self._job_of[step_id])
            if cell is not None and not all(self._reachable(node.name) for node in self._cells[cell].nodes):
                self._unreachable.add(cell)
        return status

    def lost_cells(self) -> set[int]:
        now = time.monotonic()
        if now < self._next_poll:
            return self._lost | self._unreachable
        self._next_poll = now + POLL_S
        states = job_states([cell.job_id for cell in self._cells])
        failed = failed_nodes([node.name for cell in self._cells for node in cell.nodes])
        self._lost = {index for index, cell in enumerate(self._cells)
                      if states.get(cell.job_id) != "RUNNING" or any(node.name in failed for node in cell.nodes)}
        return self._lost | self._unreachable

    def replacement(self, cell: int) -> Sequence[Node] | None:
        now = time.monotonic()
        if now < self._next_ask.get(cell, 0.0):
            return None
        self._next_ask[cell] = now + POLL_S
        asked = self._asked.get(cell)
        if asked is None:
            run_slurm(["scancel", self._cells[cell].job_id], check=False)  # whatever of it Slurm still holds
            self._asked[cell] = self._submit(cell_parameters(self._config, cell=cell), f"cell {cell}")
            self._write_cells()
            return None
        state = job_states([asked.job_id]).get(asked.job_id)
        if state != "RUNNING":
            if state not in _WAITING:  # ended without running: ask again
                self._asked[cell] = self._submit(cell_parameters(self._config, cell=cell), f"cell {cell}")
                self._write_cells()
            return None
        self._cells[cell] = self._granted(asked.job_id)
        del self._asked[cell]
        self._lost.discard(cell)
        self._unreachable.discard(cell)
        self._write_cells()
        return self._cells[cell].nodes

    def close(self) -> None:
        super().close()
        held = [*self._cells, *self._asked.values(), *self._harness_jobs]
        jobs = [job.job_id for job in held]
        if jobs:
            run_slurm(["scancel", *jobs], check=False)

    def _submit(self, parameters: dict[str, Any], what: str) -> CellJob:
        from gyrectl.cluster.slurm.executor import GyreExecutor

        executor = GyreExecutor(self._run.submitit_dir / "cells", extra_directives=self._config.cluster.extra_sbatch)
        executor.update_parameters(**parameters)
        try:
            job = executor.submit(hold_cell, self._env["SLURM_JOB_ID"])
        except Exception as exc:  # submitit raises FailedJobError or CalledProcessError for a refused sbatch
            raise RuntimeFailure(f"sbatch refused the job of {what}: {exc}") from None
        return CellJob(job_id=str(job.job_id))

    def _await_nodes(self, asked: CellJob, *, het_group: int = 1) -> CellJob:
        while (state := job_states([asked.job_id]).get(asked.job_id)) != "RUNNING":
            if state not in _WAITING:
                raise RuntimeFailure(f"job {asked.job_id} ended ({state}) before it started")
            time.sleep(1.0)
        return self._granted(asked.job_id, het_group=het_group)

    def _cell_of(self, job_id: str) -> int | None:
        return next((index for index, cell in enumerate(self._cells) if cell.job_id == job_id), None)

    def _granted(self, job_id: str, *, het_group: int = 1) -> CellJob:
        cluster = self._config.cluster
        gpus, cpus = (cluster.gpus_per_node, cluster.cpus_per_node) if het_group == 1 else (0, cluster.harnesses.cpus)
        nodes = job_nodes(job_id)
        for name in nodes:
            node = show_node(name)
            self._slurmd[name] = (node_address(name, node), slurmd_port(node))
        return CellJob(job_id=job_id, nodes=tuple(
            Node(name=name, het_group=het_group, gpus=gpus, cpus=cpus, address=self._slurmd[name][0])
            for name in nodes))

    def _reachable(self, name: str) -> bool:
        try:
            socket.create_connection(self._slurmd[name], timeout=PROBE_TIMEOUT_S).close()
        except OSError:
            return False
        return True

    def _write_cells(self) -> None:
        rows = [{"cell": index, "job_id": cell.job_id, "nodes": [node.name for node in cell.nodes]}
                for index, cell in enumerate(self._cells)]
        for index, asked in self._asked.items():
            rows[index]["replacement_job_id"] = asked.job_id
        self._run.write_json(self._run.cells_file, rows)
