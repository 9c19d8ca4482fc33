"""The learning curve of a whole run (issue 25): held-out pass@1 of the starting weights against the
final ones, with a 95 % interval from a paired bootstrap over tasks, and per step the reward, the
groups without signal and the wall time. Reads a finished run directory; ``__main__`` launches one.

    PYTHONPATH=. .venv/bin/python -m benchmarks.learning.curve RUN_DIR          # Markdown
    PYTHONPATH=. .venv/bin/python -m benchmarks.learning.curve RUN_DIR --json

Pass@1 of a version: the mean over tasks of the share of the task's eval executions that passed
(``eval.pass_threshold``), over the tasks whose executions all ran in *both* versions (an
infrastructure failure says nothing about the policy). The interval resamples tasks with
replacement (10,000 draws, seeded) and takes the 2.5th and 97.5th percentiles of the difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gyrectl.config import load_config
from gyrectl.store.jsonl import read_records


@dataclass(frozen=True)
class Comparison:
    first_version: int
    last_version: int
    tasks: int
    """Tasks whose executions all ran in both versions."""
    pass_at_1_first: float
    pass_at_1_last: float
    difference: float
    interval: tuple[float, float]
    """95 % paired bootstrap interval of ``difference``."""


def task_pass_rates(records: list[dict[str, Any]], *, threshold: float) -> dict[int, dict[str, float]]:
    """Per evaluated version, per task: the share of its executions that passed, for the tasks
    whose executions all ran (reward not None)."""
    rewards: dict[int, dict[str, list[float | None]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        rewards[int(record["eval"])][str(record["task"])].append(record["reward"])
    return {version: {task: sum(r >= threshold for r in rs) / len(rs)  # type: ignore[operator]
                      for task, rs in by_task.items() if rs and None not in rs}
            for version, by_task in rewards.items()}


def compare(rates: dict[int, dict[str, float]], *, first: int, last: int, draws: int = 10_000,
            seed: int = 0) -> Comparison:
    tasks = sorted(set(rates[first]) & set(rates[last]))
    if not tasks:
        raise ValueError(f"no task ran in full under both v{first} and v{last}")
    before = np.array([rates[first][t] for t in tasks])
    after = np.array([rates[last][t] for t in tasks])
    picks = np.random.default_rng(seed).integers(0, len(tasks), size=(draws, len(tasks)))
    differences = (after[picks] - before[picks]).mean(axis=1)
    low, high = np.percentile(differences, [2.5, 97.5])
    return Comparison(first_version=first, last_version=last, tasks=len(tasks),
                      pass_at_1_first=float(before.mean()), pass_at_1_last=float(after.mean()),
                      difference=float(after.mean() - before.mean()), interval=(float(low), float(high)))


def step_rows(run_dir: Path) -> list[dict[str, Any]]:
    keys = ("step", "reward_mean", "groups", "groups_without_signal", "signal_token_share", "loss",
            "grad_norm", "duration_s")
    return [{key: line.get(key) for key in keys} for line in read_records(run_dir / "metrics.jsonl")]


def rollout_rewards(records: list[dict[str, Any]], *, bucket: int) -> list[dict[str, Any]]:
    """Mean reward of the training executions sampled by weights ``v .. v + bucket - 1``, every
    one of them: with ``training.skip_uniform_groups`` a step's ``reward_mean`` covers only the
    groups it trained (about half right by construction), while this counts the groups kept out
    too, so it shows what the policy gets right as it trains."""
    by_bucket: dict[int, list[float]] = defaultdict(list)
    for record in records:
        if record.get("status") in ("ok", "timed_out") and isinstance(record.get("weight_version"), int):
            by_bucket[record["weight_version"] // bucket * bucket].append(float(record["reward"]))
    return [{"versions": f"v{start}-v{start + bucket - 1}", "executions": len(rewards),
             "reward_mean": round(sum(rewards) / len(rewards), 4)} for start, rewards in sorted(by_bucket.items())]


def report(run_dir: Path) -> dict[str, Any]:
    config = load_config(run_dir / "config.yaml")
    records = list(read_records(run_dir / "trajectories" / "eval-executions.jsonl"))
    rates = task_pass_rates(records, threshold=config.eval.pass_threshold)
    evals = list(read_records(run_dir / "evals.jsonl"))
    comparison = compare(rates, first=min(rates), last=max(rates))
    executions = [r for r in read_records(run_dir / "trajectories" / "executions.jsonl") if "status" in r]
    return {"run_dir": str(run_dir), "comparison": asdict(comparison), "evals": evals, "steps": step_rows(run_dir),
            "rollout_rewards": rollout_rewards(executions, bucket=10)}


def markdown(result: dict[str, Any]) -> str:
    c = result["comparison"]
    low, high = c["interval"]
    lines = [f"Held-out pass@1, v{c['first_version']} -> v{c['last_version']} over {c['tasks']} tasks: "
             f"{100 * c['pass_at_1_first']:.1f} % -> {100 * c['pass_at_1_last']:.1f} % "
             f"({100 * c['difference']:+.1f} points, 95 % interval {100 * low:+.1f} to {100 * high:+.1f})", "",
             "| weights | pass@1 | reward mean | executions | infra failures |", "|---|---|---|---|---|"]
    lines += [f"| v{e['weight_version']} | {e.get('pass_at_1')} | {e.get('reward_mean')} | {e.get('executions')} | "
              f"{e.get('infra_failures')} |" for e in result["evals"]]
    lines += ["", "| rollouts sampled by | executions | reward mean (every execution, kept-out groups too) |",
              "|---|---|---|"]
    lines += [f"| {r['versions']} | {r['executions']} | {r['reward_mean']} |" for r in result["rollout_rewards"]]
    lines += ["", "| step | reward mean | groups | without signal | signal token share | loss | grad norm | seconds |",
              "|---|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(row[key]) for key in row) + " |" for row in result["steps"]]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = report(args.run_dir)
    print(json.dumps(result, indent=2) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
