"""The gateway alone: a stub upstream (``stub_upstream.py``: vLLM's reply shape, no model) on
core 0 with the load generator; on core 1 one gateway process as the head runs it (uvloop,
recording every call to a capture store, fsync'd) and one on asyncio's own loop; the same calls
sent direct to the stub and through each gateway in alternating rounds of one run, at 1, 256 and
2,048 concurrent sessions with no delay upstream and at 256 with 500 ms, streaming and not.
Loopback only. Each session is an execution of its own (``/x/bench-N/v1``).

    PYTHONPATH=. python benchmarks/gateway/gateway_only.py [--rounds 3] [--out gateway.json]

Per case: each path's p50/p99 latency of a whole call, each gateway's added p50/p99, and the call
rate each path sustained (calls / wall time of its rounds: with no delay upstream, the gateway's
rate at 256 and 2,048 sessions is the most one gateway process carries on this core). Every call
through a gateway must be recorded: its store's records are counted at the end. Then the JSON
work of one call (the stub's reply and chunks read and written back) with the standard library
and with orjson.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from gyrectl.capture.store import scan

import stub_upstream  # beside this file

HERE = Path(__file__).parent
CASES = [(1, 300, 0), (256, 4, 0), (2048, 1, 0), (256, 6, 500)]
"""(sessions, calls each session makes one after another per round, the stub's delay per call in
ms, each call's drawn from 0.5-1.5x it, sessions starting out of step): with no delay the gateway
is saturated from 256 sessions on (its rate is the most one process carries); 500 ms (a short
generation) offers 256 sessions' calls at a rate it carries, so what it adds there is its own
time per call and what queueing the calls' chance coincidences make, as with agents."""


async def one_session(http, url, headers, body, calls, out, errors, pace: random.Random) -> None:
    delay_ms = body.get("stub_delay_ms", 0)
    if delay_ms:  # sessions out of step, as agents are: a staggered start, generations of 0.5-1.5x the delay
        await asyncio.sleep(pace.uniform(0, delay_ms / 1000))
    for _ in range(calls):
        call = {**body, "stub_delay_ms": delay_ms * pace.uniform(0.5, 1.5)} if delay_ms else body
        start = time.perf_counter()
        try:
            async with http.post(url, json=call, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    errors.append(response.status)
                    continue
        except aiohttp.ClientError as exc:
            errors.append(repr(exc))
            continue
        out.append(time.perf_counter() - start)


async def one_round(url, headers, body, sessions, calls) -> tuple[list[float], list, float]:
    """``{session}`` in ``url`` is each session's number: through the gateway, its execution."""
    latencies, errors = [], []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(one_session(http, url.format(session=i), headers, body, calls, latencies, errors,
                                           random.Random(i)) for i in range(sessions)))
        return latencies, errors, time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2) if ordered else float("nan")


def start(argv: list[str], core: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(["taskset", "-c", str(core), *argv], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


GATEWAYS = {"gateway": "uvloop", "gateway-asyncio": "asyncio"}
"""The gateway as the head runs it (uvloop), and on asyncio's own loop, side by side."""


def json_costs(tokens: int, repeat: int = 2000) -> dict:
    """Microseconds of JSON work per call, standard library vs orjson, on the stub's own reply
    and chunks: read the reply and write it back (non-streaming), read and write each chunk."""
    reply, chunks = stub_upstream.reply(tokens), [c[len(b"data: "):-2] for c in stub_upstream.chunks(tokens)[:-1]]
    out = {}
    for name, loads, dumps in (("stdlib", json.loads, lambda v: json.dumps(v, separators=(",", ":")).encode()),
                               ("orjson", orjson.loads, orjson.dumps)):
        started = time.perf_counter()
        for _ in range(repeat):
            dumps(loads(reply))
        whole = (time.perf_counter() - started) / repeat
        started = time.perf_counter()
        for _ in range(repeat):
            for chunk in chunks:
                dumps(loads(chunk))
        out[name] = {"reply_us": round(whole * 1e6, 1),
                     "stream_us": round((time.perf_counter() - started) / repeat * 1e6, 1)}
    return out


async def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp())
    token = secrets.token_urlsafe(32)
    (tmp / "token").write_text(token)
    stub, stub_url = start([sys.executable, str(HERE / "stub_upstream.py"), "--tokens", str(args.tokens)], core=0)
    gateways = {name: start([sys.executable, "-m", "gyrectl.gateway", "--token-file", str(tmp / "token"),
                             "--records", str(tmp / f"{name}.seg"), "--loop", loop,
                             "--server", f"stub={stub_url}"], core=1)
                for name, loop in GATEWAYS.items()}
    os.sched_setaffinity(0, {0})  # the load generator shares the stub's core, never the gateway's
    try:
        paths = {"direct": (f"{stub_url}/v1/chat/completions", {})}
        for name, (_, url) in gateways.items():
            paths[name] = (f"{url}/x/bench-{{session}}/v1/chat/completions", {"Authorization": f"Bearer {token}"})
        cases, warm_up_calls = [], 0
        for stream in (False, True):
            for sessions, calls, delay_ms in CASES:
                body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": args.tokens,
                        "stream": stream, "stub_delay_ms": delay_ms}
                measured = {name: {"latencies": [], "errors": [], "wall_s": 0.0} for name in paths}
                for name in GATEWAYS:
                    await one_round(*paths[name], body, 16, 1)  # warm-up: connections
                warm_up_calls += 16
                for _ in range(args.rounds):
                    for name, (url, headers) in paths.items():
                        latencies, errors, wall = await one_round(url, headers, body, sessions, calls)
                        measured[name]["latencies"] += latencies
                        measured[name]["errors"] += errors
                        measured[name]["wall_s"] += wall
                case = {"stream": stream, "sessions": sessions, "delay_ms": delay_ms}
                for name, m in measured.items():
                    case[name] = {"calls": len(m["latencies"]), "errors": len(m["errors"]),
                                  "p50_ms": pct(m["latencies"], 0.5), "p99_ms": pct(m["latencies"], 0.99),
                                  "calls_per_s": round(len(m["latencies"]) / m["wall_s"])}
                for name in GATEWAYS:
                    case[name]["added_p50_ms"] = round(case[name]["p50_ms"] - case["direct"]["p50_ms"], 2)
                    case[name]["added_p99_ms"] = round(case[name]["p99_ms"] - case["direct"]["p99_ms"], 2)
                cases.append(case)
                print(json.dumps(case), flush=True)
        records = {}
        for name, (process, _) in gateways.items():
            process.terminate()
            process.wait(30)
            through = sum(c[name]["calls"] for c in cases) + warm_up_calls
            records[name] = {"calls": through, "records": len(scan(tmp / f"{name}.seg").records)}
        return {"cases": cases, "records": records, "json_us_per_call": json_costs(args.tokens)}
    finally:
        for process in [stub, *(process for process, _ in gateways.values())]:
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
