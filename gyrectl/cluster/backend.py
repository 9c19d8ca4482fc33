"""What a backend does, from the login node and inside the allocation, and the one place that
picks it from its name.

    backend = backend_for(config)                     # the config's cluster.backend (and layout)
    print(backend.dry_run(config, run_dir=..., folder=..., python=...))   # gyrectl launch --dry-run
    job_id = backend.submit(config, run, head=run_head)                    # gyrectl launch
    backend.job_view(run, job_id, damaged={})                              # gyrectl status
    backend.cancel_waiting(view)                                           # gyrectl stop
    backend.cluster(config, run)                                           # on the head: the Cluster

The node facts (where a server listens and on which port, where a training step meets) come from
the backend too, so nothing outside ``gyrectl/cluster/`` branches on a backend's or a layout's
name (``tests/unit/test_backend_names.py`` fails when something does). The backends fill this in
next to their own code: one folder per backend, :mod:`gyrectl.cluster.local` and :mod:`gyrectl.cluster.slurm`
(whose two layouts are data of the one Slurm backend).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gyrectl.cluster.base import Cluster
from gyrectl.config.schema import Config
from gyrectl.run.files import read_job
from gyrectl.run.rundir import DamagedRunFile, RunDir
from gyrectl.store.jsonl import last_record

Head = Callable[[str], str]
"""The head's entry point (``gyrectl.launch.head.run_head``): takes the run directory, returns how
the run ended. The backend runs it (submitit pickles it; the local backend runs its module)."""


class Deadline(Protocol):
    def reached(self) -> bool:
        """Whether the head should stop now, to end before the backend ends its job."""


class NoDeadline:
    def reached(self) -> bool:
        return False


@dataclass(frozen=True)
class ComponentRow:
    """Slurm's view of a part of the run's job: a component of the head's job, or (cells layout)
    the job of a cell, or of its replacement (``cell`` names it)."""

    id: str
    state: str
    nodes: str
    cell: int | None = None

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"id": self.id, "state": self.state, "nodes": self.nodes}
        return shown if self.cell is None else {**shown, "cell": self.cell}


@dataclass(frozen=True)
class JobView:
    id: str
    backend: str
    state: str
    """``pending`` | ``running`` | ``ended`` | ``unknown``."""
    slurm_state: str = ""
    reason: str = ""
    components: list[ComponentRow] = field(default_factory=list)
    error: str = ""
    """What failed, when the head ended on a failure (``reason`` = ``failed``)."""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "backend": self.backend, "state": self.state, "slurm_state": self.slurm_state,
                "reason": self.reason, "components": [c.to_json() for c in self.components], "error": self.error}


class Backend(abc.ABC):
    """One backend: how a run's head is submitted and watched from the login node, the
    :class:`Cluster` the head acts through, and what the backend says about its nodes."""

    name: str
    """``cluster.backend`` in the config and ``backend`` in ``job.json``."""
    head_runs_here: bool = False
    """The head (and so the agent harnesses) runs on the machine ``launch`` runs on."""

    # -- from the login node ------------------------------------------------------------------
    @abc.abstractmethod
    def dry_run(self, config: Config, *, run_dir: Path, folder: Path, python: str) -> str:
        """What ``gyrectl launch --dry-run`` prints: the exact script it would submit."""

    def check_before_submitting(self, config: Config, *, run_dir: Path) -> None:  # noqa: B027 -- optional hook
        """Refuses (``UserError``), before anything is submitted, what this backend could never run."""

    @abc.abstractmethod
    def submit(self, config: Config, run: RunDir, *, head: Head) -> str:
        """Starts ``head`` for ``run`` and returns the job id that ``job.json`` records."""

    def job_id_problem(self, job_id: str) -> str:
        """What is wrong with ``job_id`` as this backend's job id in ``job.json`` (empty: nothing)."""
        return ""

    @abc.abstractmethod
    def job_view(self, run: RunDir, job_id: str, *, damaged: dict[str, str] | None) -> JobView:
        """The run's job as this backend sees it; a damaged run file is noted in ``damaged`` (when
        given) instead of raised."""

    def cancel_waiting(self, job: JobView) -> None:  # noqa: B027 -- optional hook
        """``gyrectl stop`` of a job whose head may not run yet (the stop file ends a running head):
        nothing to cancel by default."""

    # -- inside the allocation ----------------------------------------------------------------
    @abc.abstractmethod
    def cluster(self, config: Config, run: RunDir) -> Cluster:
        """The :class:`Cluster` the head discovers its nodes and starts its steps through."""

    def deadline(self) -> Deadline:
        """When the head, running in this backend's job, must stop by itself: never by default."""
        return NoDeadline()

    # -- what the backend says about its nodes --------------------------------------------------
    @abc.abstractmethod
    def server_host_args(self) -> tuple[str, ...]:
        """Arguments that make a server listen where the gateway reaches it, when fixed ahead."""

    @abc.abstractmethod
    def bind(self, command: tuple[str, ...], *, python: str, slot_gpus: int = 0, nodes_per_engine: int = 1,
             cell_nodes: tuple[str, ...] = (), master_port: int = 0) -> tuple[str, ...]:
        """A server ``command`` as each task of its step runs it: bound to its node's address if
        needed; with ``slot_gpus``, one replica per task on a node, each on its own GPU group of
        that size and its own port; with ``nodes_per_engine`` > 1, each node of ``cell_nodes``
        one rank of an engine spanning that many nodes (whose ranks meet on ``master_port``)."""

    @abc.abstractmethod
    def server_port(self, base: int, *, cell: int, slot: int = 0) -> int:
        """The port of cell ``cell``'s server in GPU group ``slot`` of its node
        (``rollout.server_port`` = ``base``)."""

    @abc.abstractmethod
    def rendezvous_host(self, first_node_host: str) -> str:
        """Where a training step's members meet, given the host of the step's first node."""


def backend_named(name: str, *, layout: str | None = None) -> Backend | None:
    """The backend called ``name`` (``job.json``'s ``backend``, with its ``layout`` for Slurm's),
    None for a name no backend has."""
    from gyrectl.cluster.local.backend import LocalBackend
    from gyrectl.cluster.slurm.backend import slurm_backend

    if name == LocalBackend.name:
        return LocalBackend()
    return slurm_backend(str(layout)) if name == "slurm" else None


def backend_for(config: Config) -> Backend:
    """The backend ``config.cluster`` names."""
    backend = backend_named(config.cluster.backend, layout=config.cluster.layout)
    assert backend is not None, f"the config schema admits no backend {config.cluster.backend!r}"
    return backend


def read_job_record(run: RunDir) -> dict[str, Any] | None:
    """``job.json`` (:func:`gyrectl.run.files.read_job`) with its backend and job id checked: a
    record no backend wrote raises ``DamagedRunFile``."""
    job = read_job(run)
    if job is None:
        return None
    backend = backend_named(job["backend"], layout=job.get("layout"))
    if backend is None:
        raise DamagedRunFile(run.job_file, f"unknown backend {job['backend']!r}")
    if problem := backend.job_id_problem(job["job_id"]):
        raise DamagedRunFile(run.job_file, problem)
    return job


def head_ended(run: RunDir) -> dict[str, Any]:
    """The head's last ``head_ended`` record (a resumed run has one per head that ran), read from
    the journal's end: the head writes it last (run_view reports the journal's damage)."""
    return last_record(run.journal_file, b"head_ended", lambda record: record.get("event") == "head_ended") or {}


def head_end_reason(run: RunDir) -> str:
    return str(head_ended(run).get("reason", ""))
