"""The one interface through which gyrectl acts on nodes: discover them, start a step on some of
them, stop it, observe it. The coordinator drives it without knowing which backend it has.

A *step* is one process group bound to a set of nodes (a vLLM server on a cell, a torchrun
training step over the train cells). On Slurm it is an ``srun`` job step inside the allocation;
on the local backend a process group on this machine; in the simulator a virtual-clock event.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from gyrectl.errors import RuntimeFailure

HARNESS_GROUP = 2
"""``Node.het_group`` of a harness node (``cluster.harnesses.nodes``)."""


@dataclass(frozen=True)
class Node:
    """One node of the allocation, as discovered on the head."""

    name: str
    """Hostname (Slurm node name, or ``local-N`` for the local backend's virtual nodes)."""
    het_group: int
    """0 = the head (coordinator), 1 = a worker: the het-job component in the hetjob layout, the
    same numbers for the head's job and the cell jobs in the cells layout; 2 = a harness node."""
    gpus: int
    """GPUs the allocation holds on this node."""
    cpus: int
    """CPUs the allocation holds on this node."""
    address: str = ""
    """Address other nodes reach it at (empty when unknown)."""


@dataclass(frozen=True)
class StepSpec:
    """What to run, where."""

    name: str
    """Human-readable step name (``rollout-cell0``, ``train-step3``); also the Slurm step name."""
    nodes: tuple[str, ...]
    """Node names the step runs on (``tasks_per_node`` tasks on each)."""
    command: tuple[str, ...]
    """argv of each task."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the tasks."""
    cpus_per_node: int = 1
    """CPUs the step takes on each node (Slurm: ``--exact``, shared by its tasks there)."""
    tasks_per_node: int = 1
    """Tasks on each node: one per replica when a node serves several (Slurm; the local backend
    runs one process per step)."""
    gpus_per_node: int = 0
    """GPUs the step takes on each node."""
    overlap: bool = False
    """Shares its nodes' CPUs, memory and GPUs with the step already there (a training member
    beside its cell's sleeping server; Slurm: ``--overlap``)."""
    log_path: Path | None = None
    """Where the step's stdout and stderr go."""


class StepState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self in (StepState.SUCCEEDED, StepState.FAILED, StepState.CANCELLED)


@dataclass(frozen=True)
class StepStatus:
    step_id: str
    state: StepState
    exit_code: int | None = None
    ended_at: float | None = None
    """When the head first saw it ended (wall clock; None: not known, as in the simulator)."""


class Cluster(abc.ABC):
    """Nodes and steps of one allocation."""

    backend: str

    @abc.abstractmethod
    def discover(self) -> Sequence[Node]:
        """The allocation's nodes, head component first."""

    @abc.abstractmethod
    def start_step(self, spec: StepSpec) -> str:
        """Starts ``spec`` and returns its step id (unique within the allocation)."""

    @abc.abstractmethod
    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        """Asks the step to stop (SIGTERM), killing it after ``grace_s`` seconds."""

    @abc.abstractmethod
    def step_status(self, step_id: str) -> StepStatus:
        """Current state of a step started by :meth:`start_step`."""

    def ended_among(self, step_ids: Iterable[str]) -> dict[str, StepStatus]:
        """The status of each of ``step_ids`` that ended (what the coordinator asks of every
        serving cell's step each round; a backend that knows which steps ended answers it without
        a look at each)."""
        return {step_id: status for step_id in step_ids if (status := self.step_status(step_id)).state.ended}

    def harness_nodes(self) -> Sequence[Node]:
        """Nodes of the allocation that run agent harnesses (``cluster.harnesses.nodes``), known
        once :meth:`discover` returned; none by default (the harnesses run on the head)."""
        return ()

    def lost_cells(self) -> set[int]:
        """Cells (``discover``'s workers in order, ``cells.nodes_per_cell`` to a cell) whose nodes the
        allocation lost. Only a layout with one job per cell loses a cell alone; in the others a
        lost node ends the whole allocation, so nothing is ever reported here."""
        return set()

    def replacement(self, cell: int) -> Sequence[Node] | None:
        """New nodes for lost cell ``cell``: asks for them the first time, then None until they are
        granted (only a layout that loses single cells can replace one)."""
        raise RuntimeFailure(f"the {self.backend} backend cannot replace cell {cell}")

    def close(self) -> None:  # noqa: B027 -- optional hook
        """Stops every step still running (the head calls it on its way out); nothing to stop by
        default."""
