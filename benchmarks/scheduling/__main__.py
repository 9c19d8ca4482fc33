"""Runs the scheduling benchmark and prints Markdown tables (the numbers in docs/performance.md).

1. Policies at 32 and 192 nodes on the three presets, several seeds: colocate, async at an even
   split, async at its best split (searched per preset on the first seed), elastic.
2. Sensitivity of the ratios to the modelling choices (32 nodes, heavy-tail, first seed).
3. Scale: 1,024 nodes and >= 20,000 concurrent executions, simulated events per second.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from gyrectl.config import load_config
from gyrectl.config.schema import Config
from gyrectl.sim.run import simulate
from gyrectl.sim.workload import PRESETS

REPO = Path(__file__).resolve().parents[2]
SHAPES = {"32 nodes (8 cells x 32 GPUs)": "configs/sim-32nodes.yaml",
          "192 nodes (32 cells x 48 GPUs)": "configs/sim-192nodes.yaml"}
SENSITIVITY = {
    "default (movable, completion batches, s=1, slots = batch)": [],
    "executions pinned to their server": ["simulator.executions_movable=false"],
    "batch = dispatch-order block (exact staleness bound)": ["scheduler.batch_order=dispatch"],
    "max_staleness 0": ["scheduler.max_staleness=0"],
    "max_staleness 2": ["scheduler.max_staleness=2"],
    "slots = 2 x batch (batch 128)": ["training.batch_executions=128"],
    "slots = batch / 2 (batch 512)": ["training.batch_executions=512"],
    "no contention (slowdown 0)": ["simulator.server_slowdown_at_full=0"],
    "training 4x slower (train ~25 % of the work)": ["simulator.train_tokens_per_s_per_gpu=200"],
    # Every move a cold start, as gyrectl's switches were before warm cells (issue 12's figures): a
    # server stopped and started, a torchrun group loading the model and saving it every step.
    "cold switches (no sleep, no resident trainer)": [
        "simulator.rollout_to_train_s=90", "simulator.train_to_rollout_s=100", "simulator.step_restart_s=60",
        "simulator.weight_sync_s=30", "simulator.train_step_overhead_s=250"],
}


def run_policy(config_path: str, *, policy: str, workload: str, seed: int, extra: list[str],
               train_cells: int = 0) -> float:
    overrides = [f"scheduler.policy={policy}", *extra]
    if train_cells:
        overrides.append(f"scheduler.async_train_cells={train_cells}")
    return simulate(load_config(REPO / config_path, overrides), workload_spec=workload, seed=seed).result


def best_split(config_path: str, *, workload: str, seed: int, extra: list[str]) -> int:
    """The async train-cell count with the shortest makespan: a coarse scan, then its neighbours."""
    cells = load_config(REPO / config_path, extra).num_cells
    coarse = sorted({max(1, min(cells - 1, round(cells * f))) for f in (0.06, 0.12, 0.25, 0.375, 0.5, 0.625)})
    times = {t: run_policy(config_path, policy="async", workload=workload, seed=seed, extra=extra,
                           train_cells=t).makespan_s
             for t in coarse}
    best = min(times, key=times.get)
    for t in (best - 1, best + 1):
        if 1 <= t < cells and t not in times:
            times[t] = run_policy(config_path, policy="async", workload=workload, seed=seed, extra=extra,
                                train_cells=t).makespan_s
    return min(times, key=times.get)


def compare(config_path: str, *, workload: str, seeds: list[int], extra: list[str]) -> dict[str, float]:
    cells = load_config(REPO / config_path, extra).num_cells
    split = best_split(config_path, workload=workload, seed=seeds[0], extra=extra)
    rows: dict[str, list] = {"colocate": [], "async even": [], "async best": [], "elastic": []}
    for seed in seeds:
        rows["colocate"].append(run_policy(config_path, policy="colocate", workload=workload, seed=seed, extra=extra))
        rows["async even"].append(run_policy(config_path, policy="async", workload=workload, seed=seed, extra=extra,
                                           train_cells=cells // 2))
        rows["async best"].append(run_policy(config_path, policy="async", workload=workload, seed=seed, extra=extra,
                                           train_cells=split))
        rows["elastic"].append(run_policy(config_path, policy="elastic", workload=workload, seed=seed, extra=extra))
    mean = {name: statistics.mean(r.makespan_s for r in results) for name, results in rows.items()}
    elastic = rows["elastic"]
    return {"split": split,
            **{f"x {name}": mean[name] / mean["elastic"] for name in ("colocate", "async even", "async best")},
            "elastic / bound": statistics.mean(r.makespan_s / r.lower_bound_s for r in elastic),
            "elastic h": mean["elastic"] / 3600, "colocate h": mean["colocate"] / 3600,
            "elastic idle": statistics.mean(r.gpu_idle_fraction for r in elastic),
            "colocate idle": statistics.mean(r.gpu_idle_fraction for r in rows["colocate"]),
            "elastic max staleness": max(max(r.staleness) for r in elastic),
            "elastic timed out %": 100 * statistics.mean(r.timed_out / r.executions_trained for r in elastic),
            "colocate timed out %": 100 * statistics.mean(r.timed_out / r.executions_trained for r in rows["colocate"])}


def table(header: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows])


def scale(*, steps: int) -> str:
    # 1,024 nodes in cells of 4 = 256 servers x 80 slots = 20,480 concurrent executions.
    overrides = ["cluster.nodes=1024", "rollout.concurrency_per_server=80", "training.batch_executions=20480",
                 f"run.steps={steps}", "scheduler.async_train_cells=1"]
    config: Config = load_config(REPO / "configs/sim-32nodes.yaml", overrides)
    started = time.perf_counter()
    result = simulate(config, workload_spec="heavy-tail", seed=0).result
    wall = time.perf_counter() - started
    return (f"1,024 nodes, 256 cells x 80 slots = 20,480 concurrent executions, {result.executions_trained} executions "
            f"over {result.steps} steps (elastic, heavy-tail): {result.events} simulated events in {wall:.1f} s = "
            f"**{result.events / wall:,.0f} events/s** (events = live world events + coordinator state transitions)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--scale-steps", type=int, default=2)
    parser.add_argument("--sensitivity-only", action="store_true", help="Only the sensitivity table (seed 0).")
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    started = time.perf_counter()
    header = ["workload", "async best split", "elastic vs colocate", "vs async even", "vs async best",
              "elastic / lower bound", "elastic h", "colocate h", "GPU idle elastic", "GPU idle colocate",
              "max staleness", "timed out % elastic", "timed out % colocate"]
    for shape, path in ({} if args.sensitivity_only else SHAPES).items():
        rows = []
        for workload in PRESETS:
            r = compare(path, workload=workload, seeds=seeds, extra=[])
            rows.append([workload, r["split"], r["x colocate"], r["x async even"], r["x async best"],
                         r["elastic / bound"], r["elastic h"], r["colocate h"], r["elastic idle"], r["colocate idle"],
                         r["elastic max staleness"], r["elastic timed out %"], r["colocate timed out %"]])
        print(f"\n### {shape}, {len(seeds)} seeds (mean makespan ratios; > 1 means elastic is faster)\n")
        print(table(header, rows), flush=True)
    rows = []
    for name, extra in SENSITIVITY.items():
        r = compare(SHAPES["32 nodes (8 cells x 32 GPUs)"], workload="heavy-tail", seeds=seeds[:1], extra=extra)
        rows.append([name, r["split"], r["x colocate"], r["x async even"], r["x async best"], r["elastic / bound"]])
    print("\n### Sensitivity (32 nodes, heavy-tail, seed 0)\n")
    print(table(["modelling choice", "async best split", "elastic vs colocate", "vs async even", "vs async best",
                 "elastic / lower bound"], rows), flush=True)
    if args.sensitivity_only:
        return
    print("\n### Scale\n")
    print(scale(steps=args.scale_steps))
    print(f"\n(benchmark wall time {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
