"""The sbatch scripts of a gyrectl run, as pure functions of its config.

``hetjob`` layout: submitit writes component 0 (the head: where the coordinator function runs,
without ``srun`` so it may start its own job steps); we add the ``#SBATCH hetjob`` separator and
component 1 (the worker pool) right after component 0's directives.

``cells`` layout: the head alone is one job; the head submits one job per cell
(:func:`cell_parameters`) that holds the cell's nodes for the head's steps.

Every value is shell-quoted, so paths with spaces and quotes are safe.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from submitit.slurm.slurm import _make_sbatch_string

from gyrectl.cluster.slurm.templates import render_template
from gyrectl.config.schema import Config
from gyrectl.errors import UserError


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


def _worker_options(config: Config) -> dict[str, Any]:
    """What each worker node holds: one task slot with all its CPUs and GPUs."""
    cluster = config.cluster
    return {"time": cluster.time_limit, "ntasks_per_node": 1, "cpus_per_task": cluster.cpus_per_node,
            "partition": cluster.partition, "account": cluster.account, "qos": cluster.qos,
            "gpus_per_node": cluster.gpus_per_node,
            "mem": f"{cluster.mem_per_node_gb}GB" if cluster.mem_per_node_gb else ""}


def cell_parameters(config: Config, *, cell: int) -> dict[str, Any]:
    """submitit parameters of cell ``cell``'s job (``cells`` layout). It is never requeued: a cell
    whose node crashed is replaced by a new job, which the head asks for."""
    cluster = config.cluster
    params: dict[str, Any] = {
        "job_name": f"gyrectl-{config.run.name}-cell{cell}",
        "nodes": config.cells.nodes_per_cell,
        "use_srun": False,  # the batch script only holds the nodes; the head starts the steps
        "setup": list(cluster.setup),
        "additional_parameters": {"no_requeue": True},
    }
    params.update({k: v for k, v in _worker_options(config).items() if v})
    return params


def harness_parameters(config: Config, *, index: int) -> dict[str, Any]:
    """submitit parameters of harness node ``index``'s job (``cells`` layout): one CPU node of its
    own (exclusive: harnesses that compile and test code take the whole node, and share it with no
    head or cell) that only holds itself for the head's harness agent step; never requeued (its
    executions run again on the other harness nodes)."""
    cluster, harnesses = config.cluster, config.cluster.harnesses
    params: dict[str, Any] = {
        "job_name": f"gyrectl-{config.run.name}-harness{index}",
        "nodes": 1, "ntasks_per_node": 1, "cpus_per_task": harnesses.cpus, "time": cluster.time_limit,
        "use_srun": False,
        "setup": list(cluster.setup),
        "exclusive": True, "additional_parameters": {"no_requeue": True},
    }
    optional = {"partition": harnesses.partition or cluster.partition, "account": cluster.account, "qos": cluster.qos,
                "mem": f"{harnesses.mem_gb}GB" if harnesses.mem_gb else ""}
    params.update({k: v for k, v in optional.items() if v})
    return params


def worker_directives(config: Config) -> list[str]:
    """``#SBATCH`` lines of component 1: one task slot per node holding all its CPUs and GPUs."""
    options = {"job-name": f"gyrectl-{config.run.name}-workers", "nodes": config.cluster.nodes,
               **{key.replace("_", "-"): value for key, value in _worker_options(config).items()}}
    lines = [f"#SBATCH --{k}={shlex.quote(str(v))}" for k, v in options.items() if v]
    return lines + [f"#SBATCH {line}" for line in config.cluster.extra_sbatch]


def render_sbatch(*, command: str, folder: Path, params: Mapping[str, Any], extra: Sequence[str] = (),
                  workers: Sequence[str] = ()) -> str:
    """submitit's script for ``params``, with the verbatim ``extra`` directives and, when
    ``workers`` are given, the hetjob separator and component 1 right after them."""
    lines = _make_sbatch_string(command=command, folder=folder, **params).split("\n")
    last_directive = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    added = [f"#SBATCH {line}" for line in extra]
    if workers:
        added.append(render_template("hetjob_worker.sbatch", worker_directives="\n".join(workers)).rstrip("\n"))
    lines[last_directive + 1:last_directive + 1] = added
    return "\n".join(lines)


def check_run_dir(run_dir: Path) -> None:
    """The run directory is the root of the log paths in ``#SBATCH --output`` / ``--error``."""
    if "%" in str(run_dir):
        raise UserError(f"run.output_root: the run directory {run_dir} holds '%', which Slurm expands in the "
                        "#SBATCH --output and --error log paths (%j is the job id) and submitit in its folder; "
                        "pick a path without '%'")


def render_for_config(config: Config, *, run_dir: Path, folder: Path, python: str) -> str:
    """The exact script ``gyrectl launch`` submits for ``config`` (also what --dry-run prints);
    for the ``cells`` layout followed by the script of cell 0's job, which the head submits."""
    check_run_dir(run_dir)
    extra = config.cluster.extra_sbatch
    head = render_sbatch(command=head_command(python, folder), folder=folder,
                         params=head_parameters(config, run_dir=run_dir), extra=extra,
                         workers=worker_directives(config) if config.cluster.layout == "hetjob" else ())
    if config.cluster.layout == "hetjob":
        return head
    cell = render_sbatch(command=head_command(python, folder / "cells"), folder=folder / "cells",
                         params=cell_parameters(config, cell=0), extra=extra)
    scripts = f"{head}\n# ---- submitted by the head, one per cell (cell 0 shown) ----\n{cell}"
    if not config.cluster.harnesses.nodes:
        return scripts
    harness = render_sbatch(command=head_command(python, folder / "cells"), folder=folder / "cells",
                            params=harness_parameters(config, index=0), extra=extra)
    return f"{scripts}\n# ---- submitted by the head, one per harness node (harness node 0 shown) ----\n{harness}"
