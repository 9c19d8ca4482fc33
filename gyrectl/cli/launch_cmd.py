"""``gyrectl launch``: submit a run (or print what would be submitted)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gyrectl.cli.options import DEFAULT_ROOT, JsonOpt, RootOpt, SetOpt
from gyrectl.cli.progress import wait_for_end
from gyrectl.cli.render import emit_json, out
from gyrectl.config import load_config
from gyrectl.errors import UserError
from gyrectl.launch.submit import dry_run_script, launch as launch_run, resume_run
from gyrectl.run.rundir import RunDir


def launch(
    config: Annotated[Path | None, typer.Argument(help="YAML config file (see configs/); not with --resume.",
                                                  show_default=False)] = None,
    set_: SetOpt = [],  # noqa: B006
    resume: Annotated[str | None, typer.Option(
        "--resume", metavar="RUN", help="Continue a run that ended before completing (cancelled, time limit, its "
                                        "head killed): a new job takes over from the run's journal.")] = None,
    replace: Annotated[bool, typer.Option(
        "--replace", help="If the config's run directory exists and its job ended (failed, stopped, even "
                          "completed), remove it and start the run afresh under the same name; refused while "
                          "its job is pending or running.")] = False,
    root: RootOpt = DEFAULT_ROOT,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the exact sbatch script (with --json: inside an object); submit nothing.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Block until the run ends, showing its progress; "
                                                       "exit 0 only if it completed.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Create a run directory and start the run (Slurm job or local head process), or continue one.

    On Slurm this submits the head (coordinator, gateway, agent harnesses) through submitit; with
    the default cluster.layout=cells the head then submits one job per cell, so a crashed node
    costs one cell (replaced when a node is free again), not the running harnesses. With
    cluster.layout=hetjob it is one heterogeneous job whose component 1 is the worker pool. The
    head moves the cells' nodes between vLLM server steps and torchrun training steps, and stops
    itself before the job's time limit. With the local backend the head
    runs as a process on this machine with virtual nodes. Either runs the whole RL loop when the
    config names a model and a harness.

    Before anything is created or submitted, launch runs the checks of gyrectl config check: the
    memory plan, and, for a loop, the model folder, every line of the task files, the verifier
    (imported in a process of its own) and the harness command's program (exit 2 naming the
    field, and FILE:LINE for a bad line).

    A run directory of the same name is never reused: --replace removes it first when its job
    ended (a failed run, launched again under its name). --resume RUN submits a new head for an
    existing run instead: it replays the run's journal, keeps every finished trajectory and
    trained step, and runs again what was in flight.

    Examples:

      gyrectl launch configs/local-tiny.yaml --wait

      gyrectl launch configs/slurm-tiny.yaml --set cluster.nodes=4 --json

      gyrectl launch configs/example-32nodes.yaml --dry-run

      gyrectl launch configs/local-tiny.yaml --replace

      gyrectl launch --resume slurm-tiny
    """
    if (config is None) == (resume is None):
        raise UserError("give a config file to start a run, or --resume RUN to continue one (not both)")
    if resume is not None:
        if set_ or dry_run or replace:
            raise UserError("--resume continues a run with the config it started with; --set, --dry-run and "
                            "--replace do not apply")
        result = resume_run(RunDir.open(resume, output_root=root))
        name = result.run_dir.name
    else:
        assert config is not None
        cfg = load_config(config, set_)
        if dry_run:
            script = dry_run_script(cfg)
            if json_:  # a script wants the text and what it is for, not text to scrape
                emit_json({"dry_run": True, "run_dir": str(RunDir.of(cfg).path), "backend": cfg.cluster.backend,
                           "layout": cfg.cluster.layout, "script": script})
            else:
                typer.echo(script, nl=False)
            return
        result = launch_run(cfg, replace=replace)
        name = cfg.run.name
    if json_:
        emit_json({"run_dir": str(result.run_dir), "job_id": result.job_id, "backend": result.backend,
                   "layout": result.layout})
    else:
        verb = "resumed" if resume is not None else "launched"
        out.print(f"[green]{verb}[/] " + escape(f"{name}: job {result.job_id} ({result.backend})\n"
                                                 f"  run directory  {result.run_dir}\n"
                                                 f"  watch it with  gyrectl status {result.run_dir} --watch"),
                  highlight=False, soft_wrap=True)
    if wait:
        wait_for_end(RunDir(result.run_dir), quiet=json_)
