"""One load process of the gateway soak (test_soak_sessions.py): sessions FIRST..LAST-1, each one
long streaming call of its own execution, started evenly over RAMP_S seconds from a local address
of its own (so 20,000 connections to one port do not run out of source ports). Prints one JSON
object: each session's (start, end) in Unix time, and every error.

    python soak_client.py GATEWAY_URL TOKEN FIRST LAST RAMP_S PAUSE_MS LOCAL_ADDRESS
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

import aiohttp


async def session(http: aiohttp.ClientSession, url: str, token: str, index: int, start_at: float, pause_ms: float,
                  out: dict) -> None:
    await asyncio.sleep(max(0.0, start_at - time.time()))
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"session {index}"}], "stream": True,
            "max_tokens": 16, "stub_pause_ms": pause_ms}
    started = time.time()
    try:
        async with http.post(f"{url}/x/soak-{index}/v1/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {token}"}) as response:
            if response.status != 200:
                out["errors"].append(f"{index}: HTTP {response.status}")
                return
            text = (await response.read()).decode()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        out["errors"].append(f"{index}: {exc!r}")
        return
    events = [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        out["errors"].append(f"{index}: the stream did not end with [DONE]")
        return
    content = "".join(c["delta"].get("content") or "" for e in events[:-1] for c in json.loads(e)["choices"])
    if not content:
        out["errors"].append(f"{index}: no content")
        return
    out["intervals"].append((started, time.time()))


async def main() -> None:
    url, token, first, last, ramp_s, pause_ms, local = sys.argv[1:8]
    first, last, ramp_s, pause_ms = int(first), int(last), float(ramp_s), float(pause_ms)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    out: dict = {"intervals": [], "errors": []}
    connector = aiohttp.TCPConnector(limit=0, local_addr=(local, 0))
    begin, count = time.time() + 1.0, last - first
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:
        await asyncio.gather(*(session(http, url, token, i, begin + ramp_s * (i - first) / count, pause_ms, out)
                               for i in range(first, last)))
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
