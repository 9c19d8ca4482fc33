"""Runs a gateway in its own process until SIGINT/SIGTERM (what the head process starts).

    python -m gyrectl.gateway --token-file RUN/token --records RUN/calls.jsonl \\
        --server node1=http://127.0.0.1:8100 --port 8000 --models tiny
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from gyrectl.gateway import Gateway, GatewaySettings, JsonlCallSink


async def serve(args: argparse.Namespace) -> None:
    settings = GatewaySettings(token=Path(args.token_file).read_text().strip(), models=tuple(args.models),
                               host=args.host, port=args.port)
    sink = JsonlCallSink(Path(args.records), fsync=not args.no_fsync)
    gateway = Gateway(settings, sink=sink)
    await gateway.start()
    for spec in args.server:
        name, _, url = spec.partition("=")
        gateway.pool.add(name, url)
    print(gateway.url, flush=True)  # the parent reads the address from the first line
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await gateway.stop()
    sink.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gyrectl.gateway")
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--records", required=True, help="JSONL file the calls are appended to")
    parser.add_argument("--server", action="append", default=[], help="NAME=URL of a rollout server")
    parser.add_argument("--models", nargs="+", default=["tiny"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--no-fsync", action="store_true", help="skip the per-record fsync (benchmarks)")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
