"""``gyrectl launch``: submit a run (or print what would be submitted)."""

from __future__ import annotations

from typing import Annotated

import typer

from gyrectl.cli.options import ConfigArg, JsonOpt, SetOpt
from gyrectl.cli.progress import wait_for_end
from gyrectl.cli.render import emit_json, out
from gyrectl.config import load_config
from gyrectl.launch.rundir import RunDir
from gyrectl.launch.submit import dry_run_script, launch as launch_run


def launch(
    config: ConfigArg,
    set_: SetOpt = [],  # noqa: B006
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the exact sbatch script; submit nothing.")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Block until the run ends, showing its progress; "
                                                       "exit 0 only if it completed.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Create a run directory and start the run (Slurm job or local head process).

    On Slurm this submits one heterogeneous job through submitit: component 0 runs the head
    (coordinator), component 1 is the worker pool. With the local backend the head runs as a
    process on this machine with virtual nodes and, when the config names a model and a harness,
    runs the whole RL loop there (vLLM servers, harnesses, torchrun steps, live weight sync).

    Examples:

      gyrectl launch configs/local-tiny.yaml --wait

      gyrectl launch configs/slurm-local.yaml --set cluster.nodes=4 --json

      gyrectl launch configs/example-32nodes.yaml --dry-run
    """
    cfg = load_config(config, set_)
    if dry_run:
        if cfg.cluster.backend != "slurm":
            out.print("# local backend: nothing is submitted; the head runs as "
                      "`python -m gyrectl.launch.head RUN_DIR` on this machine", highlight=False)
            return
        typer.echo(dry_run_script(cfg), nl=False)
        return
    result = launch_run(cfg)
    if json_:
        emit_json({"run_dir": str(result.run_dir), "job_id": result.job_id, "backend": result.backend,
                   "layout": result.layout})
    else:
        out.print(f"[green]launched[/] {cfg.run.name}: job {result.job_id} ({result.backend})\n"
                  f"  run directory  {result.run_dir}\n"
                  f"  watch it with  gyrectl status {result.run_dir} --watch", highlight=False)
    if wait:
        wait_for_end(RunDir(result.run_dir), quiet=json_)
