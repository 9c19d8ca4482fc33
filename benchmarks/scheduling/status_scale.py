"""``gyrectl status --json`` of a run of 256 cells: the scale case's simulated run (1,024 nodes in
cells of 4, 20,480 concurrent executions; its journal written as a head writes it) put in a run
directory, then status timed as a user runs it (the CLI, in process), median of 3.

    PYTHONPATH=. python benchmarks/scheduling/status_scale.py [--steps 2]

The run is a local-backend one (its head process is gone), so no Slurm is asked: what is timed is
reading and replaying the journal, the node table and the views. (On Slurm, status adds one
``scontrol`` for the head's job and one ``squeue`` for all cell jobs.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from typer.testing import CliRunner

from gyrectl.cli.app import app
from gyrectl.cluster.local.cluster import virtual_nodes
from gyrectl.config import load_config
from gyrectl.config.loader import dump_config
from gyrectl.launch.head import node_table
from gyrectl.run.rundir import RunDir
from gyrectl.sim.run import simulate

REPO = Path(__file__).resolve().parents[2]
SCALE = ["cluster.nodes=1024", "rollout.concurrency_per_server=80", "training.batch_executions=20480",
         "scheduler.async_train_cells=1", "cluster.backend=local"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    config = load_config(REPO / "configs/sim-32nodes.yaml", [*SCALE, f"run.steps={args.steps}"])
    with tempfile.TemporaryDirectory() as directory:
        run = RunDir.create(Path(directory), "scale")
        run.config_file.write_text(dump_config(config))
        run.write_json(run.job_file, {"job_id": "local-0", "backend": "local", "layout": "cells", "submitted_at": 0.0})
        run.write_json(run.nodes_file, node_table(virtual_nodes(config)))
        simulate(config, workload_spec="heavy-tail", seed=0, journal_path=run.journal_file)
        times, view = [], {}
        for _ in range(3):
            started = time.perf_counter()
            result = CliRunner().invoke(app, ["status", str(run.path), "--json"])
            times.append(time.perf_counter() - started)
            assert result.exit_code == 0, result.output
            view = json.loads(result.stdout)
        print(json.dumps({"cells": len(view["cells"]), "nodes": len(view["nodes"]),
                          "journal_events": view["records_read"]["journal.jsonl"],
                          "journal_mb": round(run.journal_file.stat().st_size / 2**20, 1),
                          "status_s_median": round(statistics.median(times), 3),
                          "status_s_all": [round(t, 3) for t in times]}, indent=2))


if __name__ == "__main__":
    main()
