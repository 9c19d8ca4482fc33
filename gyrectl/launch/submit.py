"""``gyrectl launch``: make the run directory, then hand the head to the configured backend
(:func:`gyrectl.cluster.backend.backend_for`), which submits it:

    slurm, cells layout: the head's job through submitit; the head submits one job per cell
    slurm, hetjob layout: one heterogeneous job (component 0 = head, component 1 = workers)
    local: the head as a detached process on this machine, with virtual nodes
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gyrectl.cluster.backend import backend_for
from gyrectl.config import dump_config
from gyrectl.config.schema import Config
from gyrectl.errors import UserError
from gyrectl.plan.check import require_fit
from gyrectl.rollout.sandbox import Sandbox
from gyrectl.run.files import read_job, run_config
from gyrectl.run.rundir import DamagedRunFile, RunDir


@dataclass(frozen=True)
class LaunchResult:
    run_dir: Path
    job_id: str
    backend: str
    layout: str


def dry_run_script(config: Config) -> str:
    """The exact script ``launch`` would submit, without creating anything (for the local backend,
    a comment that nothing is)."""
    require_fit(config)
    run = RunDir.of(config)
    return backend_for(config).dry_run(config, run_dir=run.path, folder=run.submitit_dir, python=sys.executable)


def launch(config: Config) -> LaunchResult:
    _check_before_submitting(config)
    run = RunDir.create(Path(config.run.output_root), config.run.name)
    run.config_file.write_text(dump_config(config))
    return _submit(config, run, previous_jobs=[])


def resume_run(run: RunDir) -> LaunchResult:
    """Submits a new head for ``run``, which takes over from its journal (``run_loop``)."""
    from gyrectl.launch.status import job_view

    config = run_config(run)
    try:
        job = job_view(run)
    except DamagedRunFile as exc:
        raise DamagedRunFile(exc.path, f"{exc.problem}; gyrectl cannot tell whether the run's jobs still run, "
                                       "so it starts no second head. Restore the file, or delete it once no job "
                                       "of this run is left (squeue), and resume again") from None
    if job.state in ("pending", "running"):
        raise UserError(f"{run.name} is still {job.state} (job {job.id}); stop it first: gyrectl stop {run.path}")
    if job.reason == "completed":
        raise UserError(f"{run.name} already completed; nothing to resume")
    _check_before_submitting(config)
    run.stop_file.unlink(missing_ok=True)
    previous = read_job(run) or {}
    return _submit(config, run, previous_jobs=[*previous.get("previous_jobs", []), previous.get("job_id")])


def _check_before_submitting(config: Config) -> None:
    check_loop_inputs(config, Path.cwd())
    require_fit(config)
    backend_for(config).check_before_submitting(config, run_dir=RunDir.of(config).path)


def _submit(config: Config, run: RunDir, *, previous_jobs: list[str]) -> LaunchResult:
    """Submits the head for ``run`` on its backend and records the job in ``job.json``."""
    from gyrectl.launch.head import run_head

    job_id = backend_for(config).submit(config, run, head=run_head)
    record = {"job_id": job_id, "backend": config.cluster.backend, "layout": config.cluster.layout,
              "submitted_at": time.time()}
    run.write_json(run.job_file, {**record, "previous_jobs": previous_jobs} if previous_jobs else record)
    return LaunchResult(run_dir=run.path, job_id=job_id, backend=config.cluster.backend, layout=config.cluster.layout)


def check_loop_inputs(config: Config, launch_dir: Path) -> None:
    """What the loop reads from the launch directory exists, before anything is submitted (the
    head runs there too: locally as a process, on Slurm in the directory sbatch was called from,
    which the cluster's shared file system shows the nodes)."""
    rollout = config.rollout
    if not rollout.harness_command:
        return
    if config.tracking.wandb != "off" and importlib.util.find_spec("wandb") is None:
        raise UserError("tracking.wandb: the wandb package is not installed here (pip install wandb, "
                        "or set tracking.wandb=off)")
    if config.scheduler.grow_running_step:
        raise UserError("scheduler.grow_running_step: only `gyrectl simulate` models a training step that grows "
                        "while it runs; a real step's rendezvous is fixed when it starts (set it to false)")
    if backend_for(config).head_runs_here:  # else the head checks on its own node
        Sandbox(rollout.sandbox).require()
    model = launch_dir / config.model.path
    if not (model / "config.json").is_file():
        hint = " (build the tiny one: gyrectl model tiny models/tiny)" if config.model.path == "models/tiny" else ""
        raise UserError(f"model.path: {model} is not an HF model folder (no config.json){hint}")
    files = [("rollout.tasks", rollout.tasks), ("rollout.verifier", rollout.verifier.split(":")[0])]
    if config.eval.every_steps:
        files.append(("eval.tasks", config.eval.tasks))
    for field, relative in files:
        if not (launch_dir / relative).is_file():
            raise UserError(f"{field}: {launch_dir / relative} does not exist")
