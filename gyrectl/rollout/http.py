"""The two HTTP calls the coordinator makes to a rollout server's control routes, always with a
timeout: a server that stops answering must fail the caller, never hang it. ``key`` is the
servers' API key (``RunDir.server_key``): every route but ``/health`` needs it (``rollout.guard``).

Standard library only: the coordinator's loop is synchronous and makes a handful of control calls
per weight version, so a client library would buy nothing.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from gyrectl.errors import RuntimeFailure


class ServerCallError(RuntimeFailure):
    """A control call to a rollout server failed: no answer in time, or a non-2xx status."""

    def __init__(self, method: str, url: str, reason: str, *, status: int | None = None):
        self.status = status
        super().__init__(f"{method} {url} failed: {reason}")


def post(url: str, body: dict[str, Any] | None = None, *, timeout_s: float, key: str = "") -> Any:
    """POSTs ``body`` as JSON; returns the decoded JSON reply (``None`` for an empty one)."""
    data = b"" if body is None else json.dumps(body).encode()
    return _call(urllib.request.Request(url, data=data, method="POST",
                                        headers={"Content-Type": "application/json", **_auth(key)}), timeout_s)


def get(url: str, *, timeout_s: float, key: str = "") -> Any:
    return _call(urllib.request.Request(url, method="GET", headers=_auth(key)), timeout_s)


def get_text(url: str, *, timeout_s: float, key: str = "") -> str:
    """A GET whose answer is text (a Prometheus ``/metrics`` page), not JSON."""
    return _call(urllib.request.Request(url, method="GET", headers=_auth(key)), timeout_s, as_text=True)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _call(request: urllib.request.Request, timeout_s: float, *, as_text: bool = False) -> Any:
    method, url = request.get_method(), request.full_url
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            text = reply.read()
    except urllib.error.HTTPError as err:
        detail = err.read()[:2000].decode(errors="replace").strip()
        raise ServerCallError(method, url, f"HTTP {err.code}: {detail}", status=err.code) from None
    except OSError as err:  # refused, reset, or no answer within timeout_s (TimeoutError)
        raise ServerCallError(method, url, f"{type(err).__name__}: {err}") from None
    if as_text:
        return text.decode(errors="replace")
    return json.loads(text) if text.strip() else None
