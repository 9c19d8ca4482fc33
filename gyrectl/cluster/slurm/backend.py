"""The Slurm backend from the login node: the head's job goes in through submitit (sbatch), its
state comes from ``scontrol``/``sacct``, and every cell has nodes of its own, so one port serves
every cell and a server binds to its node's address (``gyrectl.cluster.slurm.bind``).

Its two layouts are data of this one backend (:class:`SlurmLayout`):

    cells:  the head alone is a job; the head submits one job per cell (``cells.py``)
    hetjob: one heterogeneous job, component 0 = the head, component 1 = the workers (``slurm.py``)

Job states are folded into four words scripts can rely on — ``pending``, ``running``, ``ended``,
``unknown`` — with Slurm's own word kept beside them (``slurm_state``) and, for an ended run,
how it ended (``reason``: the head's own record when it had the chance to write one).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gyrectl.cluster.backend import Backend, ComponentRow, Deadline, Head, JobView, head_end_reason, head_ended
from gyrectl.cluster.base import Cluster
from gyrectl.cluster.slurm.bind import bind_options
from gyrectl.config.schema import Config
from gyrectl.errors import RuntimeFailure, UserError
from gyrectl.run.files import read_cells
from gyrectl.run.rundir import DamagedRunFile, RunDir

BIND_MODULE = "gyrectl.cluster.slurm.bind"
_PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED", "CONFIGURING"}
_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}


@dataclass(frozen=True)
class SlurmLayout:
    name: str
    """``cluster.layout``."""
    cell_jobs: bool
    """The head submits one job per cell (``cells``); else the workers are component 1 of the
    head's own heterogeneous job (``hetjob``)."""


CELLS = SlurmLayout("cells", cell_jobs=True)
HETJOB = SlurmLayout("hetjob", cell_jobs=False)


def slurm_backend(layout: str) -> SlurmBackend:
    """The Slurm backend of ``layout`` (a ``job.json`` without a known one reads as ``hetjob``:
    its job view then waits for no cell jobs)."""
    return SlurmBackend({CELLS.name: CELLS}.get(layout, HETJOB))


def fold_slurm_state(states: list[str]) -> str:
    """One word for a job from its components' states (a het job is running while any part is)."""
    words = {s.split()[0].rstrip("+") for s in states}
    if words & _RUNNING:
        return "running"
    if words and words <= _PENDING:
        return "pending"
    return "ended" if words else "unknown"


@dataclass(frozen=True)
class SlurmBackend(Backend):
    layout: SlurmLayout
    name = "slurm"

    def dry_run(self, config: Config, *, run_dir: Path, folder: Path, python: str) -> str:
        from gyrectl.cluster.slurm.sbatch import render_for_config

        return render_for_config(config, run_dir=run_dir, folder=folder, python=python)

    def check_before_submitting(self, config: Config, *, run_dir: Path) -> None:
        from gyrectl.cluster.slurm.cli import partition_nodes
        from gyrectl.cluster.slurm.fit import fit_problems
        from gyrectl.cluster.slurm.sbatch import check_run_dir

        check_run_dir(run_dir)
        if config.cluster.harnesses.nodes and not self.layout.cell_jobs:
            raise UserError("cluster.harnesses.nodes: harness nodes are jobs of their own, which only the cells "
                            "layout submits; set cluster.layout: cells (nothing was submitted)")
        if problems := fit_problems(config, partition_nodes()):
            raise UserError("; ".join(problems) + " (nothing was submitted)")

    def submit(self, config: Config, run: RunDir, *, head: Head) -> str:
        import submitit

        from gyrectl.cluster.slurm.executor import GyreExecutor
        from gyrectl.cluster.slurm.sbatch import head_parameters, worker_directives

        workers = () if self.layout.cell_jobs else worker_directives(config)
        try:
            executor = GyreExecutor(run.submitit_dir, extra_directives=config.cluster.extra_sbatch,
                                    worker_directives=workers)
        except RuntimeError as exc:  # submitit's "Could not detect srun"
            raise RuntimeFailure(f"cannot submit to Slurm: {exc}") from None
        executor.update_parameters(**head_parameters(config, run_dir=run.path))
        try:
            job = executor.submit(head, str(run.path))
        except (submitit.core.utils.FailedJobError, subprocess.CalledProcessError) as exc:
            raise RuntimeFailure(f"sbatch refused the job: {_sbatch_message(exc)}") from None
        submitted = run.submitit_dir / f"{job.job_id}_submission.sh"
        run.sbatch_file.write_text(submitted.read_text() if submitted.exists() else "")
        return str(job.job_id)

    def job_view(self, run: RunDir, job_id: str, *, damaged: dict[str, str] | None) -> JobView:
        from gyrectl.cluster.slurm.cli import completed_state, show_job

        components = show_job(job_id)
        if components is None:  # Slurm forgot the job (MinJobAge passed): ask the completion log
            final = completed_state(job_id) or ""
            return JobView(id=job_id, backend=self.name, state="ended" if final or head_end_reason(run) else "unknown",
                           slurm_state=final, reason=head_end_reason(run) or final.lower())
        states = [c.state for c in components]
        state = fold_slurm_state(states)
        waiting_on = "" if components[0].reason == "None" else components[0].reason
        reason = (head_end_reason(run) or components[0].state.lower()) if state == "ended" else waiting_on
        error = str(head_ended(run).get("error", "")) if state == "ended" else ""
        cells = _cell_jobs(run, damaged)
        if state == "running" and self.layout.cell_jobs and not run.nodes_file.exists():  # the head waits for its cells
            waiting = [c for c in cells if c["state"] == "PENDING"]
            state = "pending"
            reason = f"cell jobs waiting for nodes ({waiting[0]['reason']})" if waiting else "starting its cell jobs"
        return JobView(id=job_id, backend=self.name, state=state, slurm_state=",".join(states), reason=reason,
                       components=[ComponentRow(id=c.job_id, state=c.state, nodes=c.nodes) for c in components]
                       + [ComponentRow(id=c["id"], state=c["state"], nodes=c["nodes"], cell=c["cell"]) for c in cells],
                       error=error)

    def cancel_waiting(self, job: JobView) -> None:
        if job.state == "pending":
            from gyrectl.cluster.slurm.cli import run_slurm
            run_slurm(["scancel", job.id])

    def cluster(self, config: Config, run: RunDir) -> Cluster:
        if self.layout.cell_jobs:
            from gyrectl.cluster.slurm.cells import SlurmCellsCluster
            return SlurmCellsCluster(config, run)
        from gyrectl.cluster.slurm.hetjob import SlurmCluster
        return SlurmCluster()

    def deadline(self) -> Deadline:
        from gyrectl.cluster.slurm.deadline import SlurmDeadline
        return SlurmDeadline()

    def server_host_args(self) -> tuple[str, ...]:
        return ()  # the node's address is looked up on the node: see bind

    def bind(self, command: tuple[str, ...], *, python: str, slot_gpus: int = 0, nodes_per_engine: int = 1,
             cell_nodes: tuple[str, ...] = (), master_port: int = 0) -> tuple[str, ...]:
        return (python, "-m", BIND_MODULE, *bind_options(slot_gpus=slot_gpus, nodes_per_engine=nodes_per_engine,
                                                         cell_nodes=cell_nodes, master_port=master_port), *command)

    def server_port(self, base: int, *, cell: int, slot: int = 0) -> int:
        return base + slot  # every cell has nodes of its own; a node's GPU groups a port each

    def rendezvous_host(self, first_node_host: str) -> str:
        return first_node_host


def _cell_jobs(run: RunDir, damaged: dict[str, str] | None) -> list[dict[str, Any]]:
    """The cells layout's cell jobs (``cells.json``), each with the cell it holds or replaces and
    Slurm's reason while it waits; a damaged ``cells.json`` is noted in ``damaged`` when given."""
    from gyrectl.cluster.slurm.cli import show_jobs

    try:
        cells = read_cells(run)
    except DamagedRunFile as exc:
        if damaged is None:
            raise
        damaged[exc.path.name] = exc.problem
        cells = []
    held = [(str(cell[key]), cell["cell"]) for cell in cells for key in ("job_id", "replacement_job_id")
            if cell.get(key) is not None]
    shown = show_jobs([job for job, _ in held])
    rows = []
    for job, cell in held:
        state, nodes, reason = ((shown[job].state, shown[job].nodes, shown[job].reason) if job in shown
                                else ("ENDED", "", ""))
        rows.append({"id": job, "state": state, "nodes": nodes, "cell": cell, "reason": reason})
    return rows


def _sbatch_message(exc: Exception) -> str:
    output = getattr(exc, "stderr", None) or getattr(exc, "output", None) or str(exc)
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    return " ".join(str(output).split()) or type(exc).__name__
