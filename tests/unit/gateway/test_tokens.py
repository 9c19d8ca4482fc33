"""Two tokens and a locked server (issue 10, item 2), without a model: harnesses' client token
opens no admin route, a gateway never starts on a weak token, a rollout server's guard refuses
every call without the server key."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gyrectl.gateway import GatewaySettings
from gyrectl.gateway.background import BackgroundGateway
from gyrectl.gateway.settings import WeakToken
from gyrectl.rollout.guard import ServerKeyGuard

CLIENT, ADMIN = "c" * 43, "a" * 43
ADMIN_ROUTES = [("GET", "/admin/servers", None), ("POST", "/admin/servers", {"name": "evil", "url": "http://x:1"}),
                ("POST", "/admin/servers/s0/drain", {"grace_s": 0}),
                ("POST", "/admin/servers/s0/weight_version", {"version": 9}), ("DELETE", "/admin/servers/s0", None)]


def call(gateway: BackgroundGateway, method: str, path: str, body: Any = None, *, key: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(gateway.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {key}"} if key is not None else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def gateway() -> Iterator[BackgroundGateway]:
    gateway = BackgroundGateway(GatewaySettings(token=CLIENT, admin_token=ADMIN, server_wait_s=0.1), sink=None)
    gateway.call(gateway.gateway.pool.add, "s0", "http://127.0.0.1:9", weight_version=0)
    yield gateway
    gateway.close()


def test_the_client_token_opens_no_admin_route(gateway: BackgroundGateway) -> None:
    for key in (CLIENT, f"{CLIENT}.exec-3", None, "", "wrong", ADMIN[:-1]):
        for method, path, body in ADMIN_ROUTES:
            status, reply = call(gateway, method, path, body, key=key)
            assert status == (403 if key and key.startswith(CLIENT) else 401), (key, method, path, reply)
    assert [(s.name, s.state.value, s.weight_version) for s in gateway.servers()] == [("s0", "active", 0)]


def test_the_admin_token_opens_the_admin_routes_and_no_client_route(gateway: BackgroundGateway) -> None:
    assert call(gateway, "POST", "/admin/servers/s0/weight_version", {"version": 2}, key=ADMIN)[0] == 200
    assert call(gateway, "GET", "/admin/servers", key=ADMIN)[1]["servers"][0]["weight_version"] == 2
    assert call(gateway, "GET", "/v1/models", key=ADMIN)[0] == 401  # roles stay apart both ways
    assert call(gateway, "GET", "/v1/models", key=CLIENT)[0] == 200


def test_without_an_admin_token_the_admin_routes_are_off() -> None:
    gateway = BackgroundGateway(GatewaySettings(token=CLIENT), sink=None)
    try:
        for key in (CLIENT, "", ADMIN):
            assert call(gateway, "GET", "/admin/servers", key=key)[0] in (401, 403)
    finally:
        gateway.close()


@pytest.mark.parametrize(("settings", "problem"), [
    ({"token": ""}, "client token is 0 characters"),
    ({"token": "short-token"}, "client token is 11 characters"),
    ({"token": CLIENT, "admin_token": "x" * 8}, "admin token is 8 characters"),
    ({"token": CLIENT, "admin_token": CLIENT}, "equals the client token"),
])
def test_a_weak_token_stops_the_gateway(settings: dict[str, str], problem: str) -> None:
    with pytest.raises(WeakToken, match=problem):
        GatewaySettings(**settings)


def test_the_gateway_process_refuses_an_empty_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    done = subprocess.run([sys.executable, "-m", "gyrectl.gateway", "--token-file", str(tmp_path / "token"),
                           "--records", str(tmp_path / "calls.jsonl")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "client token is 0 characters" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "calls.jsonl").exists()


# -- the rollout server's guard, as vLLM runs it (an ASGI middleware) -------------------------
def through_guard(path: str, *, method: str = "POST", authorization: bytes | None = None) -> int:
    seen: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(200)

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            seen.append(message["status"])

    headers = [] if authorization is None else [(b"authorization", authorization)]
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(ServerKeyGuard(app)(scope, None, send))
    return seen[0]


def test_the_server_guard_locks_every_route_but_health(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "k" * 43)
    for path in ("/pause", "/collective_rpc", "/sleep", "/v1/completions", "/inference/v1/generate", "/metrics"):
        assert through_guard(path) == 401
        assert through_guard(path, authorization=b"Bearer " + b"c" * 43) == 401
        assert through_guard(path, authorization=b"Bearer " + b"k" * 43) == 200
    assert through_guard("/health", method="GET") == 200
    assert through_guard("/health", method="POST") == 401


def test_a_guard_without_a_key_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="VLLM_API_KEY"):
        ServerKeyGuard(lambda *args: None)
