"""The local backend from the login node: the head is a detached process on this machine
(``python -m gyrectl.launch.head RUN_DIR``), its job id ``local-PID``, and every virtual node
is this machine, so servers listen on loopback, each cell on a port of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from gyrectl.cluster.backend import Backend, Head, JobView, head_ended
from gyrectl.cluster.base import Cluster
from gyrectl.cluster.local.cluster import LocalCluster
from gyrectl.config.placement import replicas_per_node
from gyrectl.config.schema import Config
from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir

LOOPBACK = "127.0.0.1"
_JOB_ID = re.compile(r"local-[0-9]+")


class LocalBackend(Backend):
    name = "local"
    head_runs_here = True

    def dry_run(self, config: Config, *, run_dir: Path, folder: Path, python: str) -> str:
        return ("# local backend: nothing is submitted; the head runs as "
                "`python -m gyrectl.launch.head RUN_DIR` on this machine\n")

    def submit(self, config: Config, run: RunDir, *, head: Head) -> str:
        log = open(run.logs_dir / "head.log", "ab")
        with log:
            proc = subprocess.Popen([sys.executable, "-m", head.__module__, str(run.path)],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=os.getcwd())
        return f"local-{proc.pid}"

    def job_id_problem(self, job_id: str) -> str:
        return "" if _JOB_ID.fullmatch(job_id) else f"job_id {job_id!r} is not local-PID"

    def job_view(self, run: RunDir, job_id: str, *, damaged: dict[str, str] | None) -> JobView:
        pid = int(job_id.removeprefix("local-") or 0)
        alive = pid > 0 and _is_head_process(pid, run)
        if alive:
            return JobView(id=job_id, backend=self.name, state="running")
        ended = head_ended(run)
        return JobView(id=job_id, backend=self.name, state="ended", reason=ended.get("reason") or "head process gone",
                       error=ended.get("error", ""))

    def cluster(self, config: Config, run: RunDir) -> Cluster:
        return LocalCluster(config, owner=str(run.path.resolve()))

    def server_host_args(self) -> tuple[str, ...]:
        return ("--host", LOOPBACK)

    def check_before_submitting(self, config: Config, *, run_dir: Path) -> None:
        per_node = replicas_per_node(config)
        if config.cells.nodes_per_cell != 1 or per_node != 1:
            raise UserError(
                f"cells.nodes_per_cell: the local backend runs each step as one process on this machine, so a cell "
                f"is one virtual node serving one engine, not {config.cells.nodes_per_cell} node(s) of {per_node} "
                f"server replica(s) each (gpus_per_node / (tensor_parallel x pipeline_parallel)); cells of "
                f"several nodes or GPU groups need cluster.backend=slurm")

    def bind(self, command: tuple[str, ...], *, python: str, slot_gpus: int = 0, nodes_per_engine: int = 1,
             cell_nodes: tuple[str, ...] = (), master_port: int = 0) -> tuple[str, ...]:
        return command  # one server per cell: check_before_submitting refuses more

    def server_port(self, base: int, *, cell: int, slot: int = 0) -> int:
        return base + cell  # the virtual nodes share this machine

    def rendezvous_host(self, first_node_host: str) -> str:
        return LOOPBACK


def _is_head_process(pid: int, run: RunDir) -> bool:
    """True if ``pid`` is still this run's head (not a recycled pid, not a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and b"gyrectl.launch.head" in argv and os.fsencode(str(run.path)) in argv
