"""The rollout server's own lock: an ASGI middleware vLLM loads (``--middleware``) that answers 401
to every request that does not carry the server key.

vLLM's ``--api-key`` (given here as ``VLLM_API_KEY``, so the key never shows in ``ps``) guards only
``/v1``, ``/v2``, ``/inference`` and ``/cohere``: the routes live weight sync opens with
``VLLM_SERVER_DEV_MODE=1`` (``/pause``, ``/collective_rpc``, ``/sleep``, ``/reset_prefix_cache``)
would stay open to anyone who reaches the port. This guards them all. Only ``GET /health`` stays
open: it tells nothing but "up", and health probes should not need a secret.

Runs inside the vLLM server process, so it imports nothing beyond the standard library.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

KEY_ENV = "VLLM_API_KEY"
MIDDLEWARE = f"{__name__}.ServerKeyGuard"
OPEN_ROUTES = frozenset({("GET", "/health")})

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_REFUSED = json.dumps({"error": "Unauthorized: this rollout server takes the run's server key"}).encode()


class ServerKeyGuard:
    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]):
        key = os.environ.get(KEY_ENV, "")
        if not key:  # an unlocked server is worse than one that does not start
            raise RuntimeError(f"{MIDDLEWARE} needs the server key in ${KEY_ENV}")
        self.app, self._key = app, f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": _REFUSED})

    def _allowed(self, scope: Scope) -> bool:
        if (scope.get("method"), scope["path"]) in OPEN_ROUTES:
            return True
        presented = dict(scope.get("headers") or ()).get(b"authorization", b"")
        return hmac.compare_digest(presented, self._key)
