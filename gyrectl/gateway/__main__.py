"""Runs a gateway in its own process until SIGINT/SIGTERM (what the head process starts).

    python -m gyrectl.gateway --token-file RUN/token --admin-token-file RUN/admin_token \\
        --server-key-file RUN/server_key --records RUN/calls.seg \\
        --server node1=http://127.0.0.1:8100 --port 8000 --models tiny

Without ``--admin-token-file`` the admin routes are off. A token file that is missing, empty or
short stops the gateway with exit 2 before it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import NoReturn

import uvloop

from gyrectl.capture.store import CaptureWriter
from gyrectl.gateway import Gateway, GatewaySettings, JsonlCallSink
from gyrectl.gateway.settings import WeakToken


def settings_from(args: argparse.Namespace) -> GatewaySettings:
    """The settings the arguments ask for; ``SystemExit(2)`` with a message for a bad token file."""
    def secret(path: str | None) -> str:
        if path is None:
            return ""
        try:
            return Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            _refuse(f"cannot read the token file {path}: {exc}")
    try:
        return GatewaySettings(token=secret(args.token_file), admin_token=secret(args.admin_token_file),
                               server_key=secret(args.server_key_file), models=tuple(args.models),
                               host=args.host, port=args.port, server_wait_s=args.server_wait_s)
    except WeakToken as exc:
        _refuse(str(exc))


def _refuse(message: str) -> NoReturn:
    print(f"gateway: {message}", file=sys.stderr)
    raise SystemExit(2)


async def serve(args: argparse.Namespace, settings: GatewaySettings) -> None:
    records = Path(args.records)
    sink = (CaptureWriter if records.suffix == ".seg" else JsonlCallSink)(records, fsync=not args.no_fsync)
    gateway = Gateway(settings, sink=sink)
    await gateway.start(reuse_port=args.reuse_port, admin_port=args.admin_port)
    for spec in args.server:
        name, _, url = spec.partition("=")
        gateway.pool.add(name, url)
    # The parent reads the address from the first line (and the admin address from the second).
    print(gateway.url if args.admin_port is None else f"{gateway.url}\n{gateway.admin_url}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await gateway.stop()
    sink.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gyrectl.gateway")
    parser.add_argument("--token-file", required=True, help="the client token harnesses present")
    parser.add_argument("--admin-token-file", help="the token the admin routes take (none: admin routes off)")
    parser.add_argument("--server-key-file", help="the rollout servers' API key, sent on every upstream call")
    parser.add_argument("--records", required=True,
                        help="where the calls are appended: a capture store (as the head writes) if it ends in "
                             ".seg, else JSONL")
    parser.add_argument("--server", action="append", default=[], help="NAME=URL of a rollout server")
    parser.add_argument("--models", nargs="+", default=["tiny"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--reuse-port", action="store_true",
                        help="share --port with other gateway processes (SO_REUSEPORT: the kernel spreads connections)")
    parser.add_argument("--admin-port", type=int,
                        help="also listen on 127.0.0.1 at this port (0: any; printed on the second line), so a "
                             "parent reaches this process alone")
    parser.add_argument("--server-wait-s", type=float, default=60.0,
                        help="how long a call waits for a server while none is routed")
    parser.add_argument("--no-fsync", action="store_true", help="skip the records' fsync (benchmarks)")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="the event loop (the head's gateway runs on uvloop; asyncio to compare)")
    args = parser.parse_args()
    settings = settings_from(args)
    loop_factory = uvloop.new_event_loop if args.loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(args, settings))


if __name__ == "__main__":
    main()
