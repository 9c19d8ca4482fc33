"""The sbatch script of a heterogeneous gyrectl job, as a pure function of its parameters.

submitit writes component 0 (the head: where the coordinator function runs, without ``srun`` so
it may start its own job steps); we add the ``#SBATCH hetjob`` separator and component 1 (the
worker pool) right after component 0's directives. Every value is shell-quoted, so paths with
spaces and quotes are safe.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from submitit.slurm.slurm import _make_sbatch_string

from gyrectl.config.schema import Config
from gyrectl.launch.templates import render_template


def head_command(python: str, folder: Path) -> str:
    """The batch script's command: submitit's runner for the pickled head function."""
    return f"{python} -u -m submitit.core._submit {shlex.quote(str(folder))}"


def head_parameters(config: Config, *, run_dir: Path) -> dict[str, Any]:
    """submitit parameters of component 0 (one task, the coordinator's CPUs)."""
    cluster = config.cluster
    params: dict[str, Any] = {
        "job_name": f"gyrectl-{config.run.name}",
        "time": cluster.time_limit,
        "nodes": 1,
        "ntasks_per_node": 1,
        "cpus_per_task": cluster.head.cpus,
        "use_srun": False,  # the head function launches its own steps; inside srun it would block them
        "setup": [f"export GYRECTL_RUN_DIR={shlex.quote(str(run_dir))}", *cluster.setup],
    }
    optional = {
        "partition": cluster.head.partition or cluster.partition,
        "account": cluster.account,
        "qos": cluster.qos,
        "mem": f"{cluster.head.mem_gb}GB" if cluster.head.mem_gb else "",
    }
    params.update({k: v for k, v in optional.items() if v})
    return params


def worker_directives(config: Config) -> list[str]:
    """``#SBATCH`` lines of component 1: one task slot per node holding all its CPUs and GPUs."""
    cluster = config.cluster
    options: dict[str, Any] = {
        "job-name": f"gyrectl-{config.run.name}-workers",
        "time": cluster.time_limit,
        "nodes": cluster.nodes,
        "ntasks-per-node": 1,
        "cpus-per-task": cluster.cpus_per_node,
        "partition": cluster.partition,
        "account": cluster.account,
        "qos": cluster.qos,
        "gpus-per-node": cluster.gpus_per_node,
        "mem": f"{cluster.mem_per_node_gb}GB" if cluster.mem_per_node_gb else "",
    }
    lines = [f"#SBATCH --{k}={shlex.quote(str(v))}" for k, v in options.items() if v]
    return lines + [f"#SBATCH {line}" for line in cluster.extra_sbatch]


def render_hetjob_sbatch(*, command: str, folder: Path, head: Mapping[str, Any],
                         workers: Sequence[str], extra_head: Sequence[str] = ()) -> str:
    """Component 0 from submitit, then the hetjob separator and component 1."""
    text = _make_sbatch_string(command=command, folder=folder, **head)
    lines = text.split("\n")
    last_directive = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    head_extra = [f"#SBATCH {line}" for line in extra_head]
    worker_block = render_template("hetjob_worker.sbatch", worker_directives="\n".join(workers)).rstrip("\n")
    lines[last_directive + 1:last_directive + 1] = [*head_extra, worker_block]
    return "\n".join(lines)


def render_for_config(config: Config, *, run_dir: Path, folder: Path, python: str) -> str:
    """The exact script ``gyrectl launch`` submits for ``config`` (also what --dry-run prints)."""
    return render_hetjob_sbatch(
        command=head_command(python, folder), folder=folder,
        head=head_parameters(config, run_dir=run_dir), workers=worker_directives(config),
        extra_head=config.cluster.extra_sbatch)
