"""The coordination benchmark on the real local Slurm cluster (tests/slurm/up.sh), printed as
Markdown (the figures in docs/performance.md):

1. One cell's switch in each direction, split into its parts (``switch.py``, inside an
   allocation submitted here), medians over the rounds.
2. End-to-end time per training step of the same run (configs/slurm-tiny.yaml) under the elastic
   and the colocate policy, one after the other on the same cluster, with the training steps'
   ``time_s.load`` in a started trainer and in a reused (resident) one.
3. With ``--warm-only`` instead: one cell's switch both ways, warm (the server sleeps and wakes)
   against cold (stopped and started), side by side (``warm.py``, inside an allocation).

    bash tests/slurm/up.sh && gyrectl model tiny models/tiny && python -m benchmarks.coordination
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gyrectl.coordinator.events import TrainEnded
from gyrectl.coordinator.journal import read_events
from gyrectl.store.jsonl import read_records

REPO = Path(__file__).resolve().parents[2]


def in_allocation(module: str, *args: str) -> str:
    """What ``python -m module args`` prints, run inside a two-node allocation of the cluster."""
    out = Path(tempfile.mkdtemp(dir=REPO / "runs")) / f"{module.rsplit('.', 1)[-1]}.out"
    script = f"#!/bin/bash\ncd {REPO} && {sys.executable} -m {module} {' '.join(args)}\n"
    subprocess.run(["sbatch", "--wait", "-N2", "-c4", "--exclusive", "-p", "lab", "-J", f"gyrectl-{out.stem}-bench",
                    "-o", str(out)], input=script, text=True, check=True, capture_output=True)
    return out.read_text()


def switch_rounds(model: Path, rounds: int) -> list[dict]:
    printed = in_allocation("benchmarks.coordination.switch", "--model", str(model), "--rounds", str(rounds))
    return [json.loads(line) for line in printed.splitlines() if line.startswith("{")]


def warm_against_cold(model: Path, rounds: int) -> str:
    """benchmarks/coordination/warm.py on the cluster: its Markdown table."""
    printed = in_allocation("benchmarks.coordination.warm", "--backend", "slurm", "--model", str(model),
                            "--rounds", str(rounds))
    return printed[printed.index("### "):] if "### " in printed else printed


def end_to_end(model: Path, policy: str, steps: int) -> dict:
    name = f"bench-{policy}-{int(time.time())}"
    result = subprocess.run([sys.executable, "-m", "gyrectl", "launch", "configs/slurm-tiny.yaml", "--wait", "--json",
                             "--set", f"scheduler.policy={policy}", "--set", f"run.name={name}",
                             "--set", f"run.steps={steps}", "--set", f"model.path={model}"],
                            cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{policy} run failed: {result.stderr[-2000:]}")
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    events = read_events(run_dir / "journal.jsonl")
    ended = [e.at for e in events if isinstance(e, TrainEnded)]
    steps = list(read_records(run_dir / "metrics.jsonl"))
    loads = {origin: [s["time_s"]["load"] for s in steps if s["trainer"] == origin] for origin in ("started", "reused")}
    return {"policy": policy, "total_s": ended[-1] - events[0].at,
            "per_step_s": (ended[-1] - ended[0]) / (len(ended) - 1), "run_dir": str(run_dir),
            "load_started_s": loads["started"], "load_reused_s": loads["reused"]}


def _median_of(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({len(values)} steps)" if values else "-"


def _median(rows: list[dict], direction: str, part: str) -> float:
    return statistics.median(row[direction][part] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models/tiny")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--switch-only", action="store_true", help="Skip the end-to-end runs.")
    parser.add_argument("--warm-only", action="store_true",
                        help="Only the warm-against-cold switch (benchmarks/coordination/warm.py) on the cluster.")
    args = parser.parse_args()
    model = args.model.resolve()
    if args.warm_only:
        print(warm_against_cold(model, args.rounds))
        return

    rows = switch_rounds(model, args.rounds)
    print(f"### One switch, median of {len(rows)} rounds (seconds)\n")
    print("| direction | part | median | max |\n|---|---|---:|---:|")
    coordination = {"to_train": ("drain", "stop_server_step", "start_train_step"),
                    "to_rollout": ("stop_train_step", "start_server_step", "route")}
    for direction, parts in (("to_train", ("drain", "stop_server_step", "start_train_step", "worker_process_up",
                                           "torch_import", "process_group_up")),
                             ("to_rollout", ("stop_train_step", "start_server_step", "engine_start", "route"))):
        for part in parts:
            print(f"| {direction} | {part} | {_median(rows, direction, part):.3f} | "
                  f"{max(r[direction][part] for r in rows):.3f} |")
        total = [sum(r[direction][p] for p in coordination[direction]) for r in rows]
        print(f"| {direction} | **coordination ({' + '.join(coordination[direction])})** | "
              f"**{statistics.median(total):.3f}** | {max(total):.3f} |")

    if args.switch_only:
        return
    print(f"\n### End to end, {args.steps} steps of configs/slurm-tiny.yaml\n")
    results = [end_to_end(model, policy, args.steps) for policy in ("elastic", "colocate")]
    print("| policy | run (s) | per step after the first (s) | time_s.load, started steps (median) | "
          "time_s.load, reused steps (median) |\n|---|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['policy']} | {r['total_s']:.1f} | {r['per_step_s']:.1f} | {_median_of(r['load_started_s'])} | "
              f"{_median_of(r['load_reused_s'])} |")
    elastic, colocate = results
    print(f"\nelastic speed-up over colocate: {colocate['total_s'] / elastic['total_s']:.2f}x end to end, "
          f"{colocate['per_step_s'] / elastic['per_step_s']:.2f}x per step")


if __name__ == "__main__":
    main()
