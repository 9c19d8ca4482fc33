"""The head process: the batch script of the head's job (cells layout), component 0 of the
heterogeneous job (hetjob layout), or a local process.

    discover the allocation -> write the node table -> run the coordinator -> record how it ended

With a model and a harness configured, the head runs the RL loop (:mod:`gyrectl.launch.loop`) until
the configured steps are trained (``completed``). Otherwise it holds the allocation with every node
``idle``. It ends on completion, ``gyrectl stop``, ``scancel``, the time limit or a failure; each
is written to the journal so ``gyrectl status`` can say how the run ended.

Run by hand (local backend): ``python -m gyrectl.launch.head RUN_DIR``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

from gyrectl.cluster.backend import Deadline, backend_for
from gyrectl.cluster.base import Node
from gyrectl.config import load_config
from gyrectl.errors import GyreError
from gyrectl.launch.head_log import head_log
from gyrectl.launch.loop import run_loop
from gyrectl.launch.preflight import runnable
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender

IDLE = "idle"
POLL_S = 0.5
_SIGNALLED = {signal.SIGTERM: "cancelled", signal.SIGINT: "interrupted", signal.SIGUSR2: "time_limit"}
"""How the run ended, by the signal that ended it: scancel, Ctrl-C, a time-limit warning."""
log = logging.getLogger("gyrectl.head")


def node_table(nodes: list[Node]) -> list[dict[str, object]]:
    """The rows of ``nodes.json``; roles stay ``idle`` until the coordinator assigns them."""
    return [{**asdict(node), "role": IDLE} for node in nodes]


def run_head(run_path: str) -> str:
    """Entry point of the head; returns how the run ended (also the submitit result)."""
    run = RunDir(Path(run_path))
    stop = threading.Event()
    ended_by: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        ended_by.append(_SIGNALLED[signal.Signals(signum)])
        stop.set()

    deadlines: list[Deadline] = []  # the backend's, once the config names it

    def stopped() -> bool:
        if not stop.is_set() and any(d.reached() for d in deadlines):
            ended_by.append("time_limit")
            stop.set()
        return stop.is_set() or run.stop_file.exists()

    for sig in _SIGNALLED:
        signal.signal(sig, on_signal)

    with head_log(run.logs_dir / "head.log"), JsonlAppender(run.journal_file) as journal:
        started = {"host": socket.gethostname(), "pid": os.getpid(), "slurm_job_id": os.environ.get("SLURM_JOB_ID")}
        journal.append({"event": "head_started", "at": time.time(), **started})
        log.info("head started for %s (%s)", run.path, ", ".join(f"{k} {v}" for k, v in started.items() if v))
        config = load_config(run.config_file)
        backend = backend_for(config)
        deadlines.append(backend.deadline())
        cluster = backend.cluster(config, run)
        error = ""
        try:
            nodes = list(cluster.discover())  # in the cells layout: waits for every cell's job to start
            table = node_table([*nodes, *cluster.harness_nodes()])
            run.write_json(run.nodes_file, table)
            journal.append({"event": "nodes_discovered", "at": time.time(), "nodes": [n.name for n in nodes],
                            "harness_nodes": [n.name for n in cluster.harness_nodes()]})
            log.info("nodes: %s", ", ".join(n.name for n in [*nodes, *cluster.harness_nodes()]))
            if runnable(config):
                final = run_loop(run=run, config=config, cluster=cluster, nodes=nodes, table=table,
                                 launch_dir=Path.cwd(), stopped=stopped)
                completed = final.done
            else:  # an allocation without a loop to run: hold it until stopped
                while not stopped():
                    stop.wait(POLL_S)
                completed = False
        except GyreError as exc:
            error, completed = str(exc), False
        except Exception as exc:  # a bug: still say how the run ended, with the traceback in head.log
            log.exception("the head failed")
            error, completed = f"{type(exc).__name__}: {exc}", False
        finally:
            cluster.close()
        if ended_by and not completed:
            # Slurm signals the whole job at once: steps dying under the head in its last seconds
            # are the cancellation's doing, not a failure of the run.
            reason, error = ended_by[0], ""
        elif error:
            reason = "failed"
        else:
            reason = "completed" if completed else "stopped"
        journal.append({"event": "head_ended", "at": time.time(), "reason": reason, "error": error})
        if error:
            log.error("the run failed: %s", error)
        else:
            log.info("head ended: %s", reason)
    return reason


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m gyrectl.launch.head RUN_DIR")
    run_head(sys.argv[1])
