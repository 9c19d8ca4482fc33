"""``gyrectl launch``: check what the run will read (the memory plan, the pre-flight of
:mod:`gyrectl.launch.preflight`, the backend's own check), make the run directory (``--replace``
first removes an ended run of the same name), then hand the head to the configured backend
(:func:`gyrectl.cluster.backend.backend_for`), which submits it:

    slurm, cells layout: the head's job through submitit; the head submits one job per cell
    slurm, hetjob layout: one heterogeneous job (component 0 = head, component 1 = workers)
    local: the head as a detached process on this machine, with virtual nodes
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gyrectl.cluster.backend import JobView, backend_for
from gyrectl.config import dump_config
from gyrectl.config.schema import Config
from gyrectl.errors import UserError
from gyrectl.launch.preflight import check_loop_inputs
from gyrectl.plan.check import require_fit
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


def launch(config: Config, *, replace: bool = False) -> LaunchResult:
    """Makes the run directory and submits the head. ``replace``: a run directory of the same name
    whose job ended is removed first, once every check before submitting passed."""
    _check_before_submitting(config)
    if replace:
        _remove_ended_run(RunDir.of(config))
    run = RunDir.create(Path(config.run.output_root), config.run.name)
    run.config_file.write_text(dump_config(config))
    return _submit(config, run, previous_jobs=[])


def resume_run(run: RunDir) -> LaunchResult:
    """Submits a new head for ``run``, which takes over from its journal (``run_loop``)."""
    config = run_config(run)
    job = _ended_job(run, retry="resume again")
    if job.reason == "completed":
        raise UserError(f"{run.name} already completed; nothing to resume")
    _check_before_submitting(config)
    run.stop_file.unlink(missing_ok=True)
    previous = read_job(run) or {}
    return _submit(config, run, previous_jobs=[*previous.get("previous_jobs", []), previous.get("job_id")])


def _remove_ended_run(run: RunDir) -> None:
    """Removes ``run`` for ``launch --replace`` (nothing to do if there is none), once its job ended."""
    if not run.path.exists():
        return
    if not run.config_file.is_file():
        raise UserError(f"{run.path} is not a gyrectl run directory (no config.yaml); --replace removes only runs, "
                        "so it was left alone: pick another name (--set run.name=...)")
    _ended_job(run, retry="launch with --replace again")
    try:
        shutil.rmtree(run.path)
    except OSError as exc:
        raise UserError(f"--replace could not remove {run.path}: {exc.strerror} ({exc.filename})") from None


def _ended_job(run: RunDir, *, retry: str) -> JobView:
    """The run's job, refused while it is pending or running (a second head would share its run
    directory), or when a damaged ``job.json`` hides whether it is; ``retry`` says what to do after."""
    from gyrectl.status.view import job_view

    try:
        job = job_view(run)
    except DamagedRunFile as exc:
        raise DamagedRunFile(exc.path, f"{exc.problem}; gyrectl cannot tell whether the run's jobs still run, "
                                       "so it starts no second head. Restore the file, or delete it once no job "
                                       f"of this run is left (squeue), and {retry}") from None
    if job.state in ("pending", "running"):
        raise UserError(f"{run.name} is still {job.state} (job {job.id}); stop it first: gyrectl stop {run.path}, "
                        f"then {retry}")
    return job


def _check_before_submitting(config: Config) -> None:
    require_fit(config)
    check_loop_inputs(config, Path.cwd())
    backend_for(config).check_before_submitting(config, run_dir=RunDir.of(config).path)


def _submit(config: Config, run: RunDir, *, previous_jobs: list[str]) -> LaunchResult:
    """Submits the head for ``run`` on its backend and records the job in ``job.json``."""
    from gyrectl.launch.head import run_head

    job_id = backend_for(config).submit(config, run, head=run_head)
    record = {"job_id": job_id, "backend": config.cluster.backend, "layout": config.cluster.layout,
              "submitted_at": time.time()}
    run.write_json(run.job_file, {**record, "previous_jobs": previous_jobs} if previous_jobs else record)
    return LaunchResult(run_dir=run.path, job_id=job_id, backend=config.cluster.backend, layout=config.cluster.layout)

