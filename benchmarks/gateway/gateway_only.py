"""The gateway alone: a stub upstream (``stub_upstream.py``: vLLM's reply shape, no model, no
delay) on core 0 with the load generator, one gateway process on core 1 recording every call,
and the same calls sent direct to the stub and through the gateway in alternating rounds of one
run, at 1, 256 and 2,048 concurrent sessions, streaming and not. Loopback only.

    PYTHONPATH=. python benchmarks/gateway/gateway_only.py [--rounds 3] [--out gateway.json]

Per case: each path's p50/p99 latency of a whole call, the gateway's added p50/p99, and the call
rate each path sustained (calls / wall time of its rounds: with no delay upstream, the gateway's
rate at 2,048 sessions is the most one gateway process carries on this core). Every call through
the gateway must be recorded: the records are counted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

HERE = Path(__file__).parent
CASES = [(1, 300), (256, 4), (2048, 1)]
"""(sessions, calls each session makes one after another, per round)."""


async def one_session(http, url, headers, body, calls, out, errors) -> None:
    for _ in range(calls):
        start = time.perf_counter()
        try:
            async with http.post(url, json=body, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    errors.append(response.status)
                    continue
        except aiohttp.ClientError as exc:
            errors.append(repr(exc))
            continue
        out.append(time.perf_counter() - start)


async def one_round(url, headers, body, sessions, calls) -> tuple[list[float], list, float]:
    latencies, errors = [], []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(one_session(http, url, headers, body, calls, latencies, errors)
                               for _ in range(sessions)))
        return latencies, errors, time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2) if ordered else float("nan")


def start(argv: list[str], core: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(["taskset", "-c", str(core), *argv], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


async def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp())
    token = secrets.token_urlsafe(32)
    (tmp / "token").write_text(token)
    stub, stub_url = start([sys.executable, str(HERE / "stub_upstream.py"), "--tokens", str(args.tokens)], core=0)
    gateway, gateway_url = start([sys.executable, "-m", "gyrectl.gateway", "--token-file", str(tmp / "token"),
                                  "--records", str(tmp / "calls.jsonl"), "--no-fsync",
                                  "--server", f"stub={stub_url}"], core=1)
    os.sched_setaffinity(0, {0})  # the load generator shares the stub's core, never the gateway's
    try:
        paths = {"direct": (f"{stub_url}/v1/chat/completions", {}),
                 "gateway": (f"{gateway_url}/x/bench/v1/chat/completions", {"Authorization": f"Bearer {token}"})}
        cases = []
        for stream in (False, True):
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": args.tokens,
                    "stream": stream}
            for sessions, calls in CASES:
                measured = {name: {"latencies": [], "errors": [], "wall_s": 0.0} for name in paths}
                await one_round(*paths["gateway"], body, 16, 1)  # warm-up: connections
                for _ in range(args.rounds):
                    for name, (url, headers) in paths.items():
                        latencies, errors, wall = await one_round(url, headers, body, sessions, calls)
                        measured[name]["latencies"] += latencies
                        measured[name]["errors"] += errors
                        measured[name]["wall_s"] += wall
                case = {"stream": stream, "sessions": sessions}
                for name, m in measured.items():
                    case[name] = {"calls": len(m["latencies"]), "errors": len(m["errors"]),
                                  "p50_ms": pct(m["latencies"], 0.5), "p99_ms": pct(m["latencies"], 0.99),
                                  "calls_per_s": round(len(m["latencies"]) / m["wall_s"])}
                case["added_p50_ms"] = round(case["gateway"]["p50_ms"] - case["direct"]["p50_ms"], 2)
                case["added_p99_ms"] = round(case["gateway"]["p99_ms"] - case["direct"]["p99_ms"], 2)
                cases.append(case)
                print(json.dumps(case), flush=True)
        gateway.terminate()
        gateway.wait(30)
        through = sum(c["gateway"]["calls"] for c in cases) + 2 * 16 * len(CASES)  # with the warm-ups
        records = sum(1 for _ in open(tmp / "calls.jsonl"))
        return {"cases": cases, "gateway_calls": through, "records": records}
    finally:
        for process in (gateway, stub):
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=16, help="completion tokens per reply")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 8192 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (8192, hard))  # 2,048 sessions: a socket each, and the gateway's
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
