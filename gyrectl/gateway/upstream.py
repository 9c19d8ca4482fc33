"""HTTP to the rollout servers (aiohttp client), with every way a server can fail a call --
vanish, answer 5xx, answer something that is no reply -- mapped to :class:`UpstreamLost` (with
its :class:`Loss`) so the call engine can move the call.

A cancelled lease (drain grace over, server removed) closes the call's connection at once and
asks the server to abort the request, so the server stops spending compute on it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from gyrectl.gateway import wire_json
from gyrectl.gateway.errors import Loss, UpstreamLost
from gyrectl.gateway.pool import Lease
from gyrectl.gateway.sse import DONE, SseParser


class UpstreamRejected(Exception):
    """The server refused the request itself (4xx): the client gets that answer unchanged."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"upstream answered {status}")
        self.status = status
        self.body = body


class Upstream:
    def __init__(self, *, read_timeout_s: float = 120.0, connect_timeout_s: float = 5.0, server_key: str = ""):
        # No pool limit: concurrency is bounded by the harnesses, and a limit here would queue
        # calls invisibly in front of the servers' own scheduler.
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {server_key}"} if server_key else None,
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None, connect=connect_timeout_s,
                                          sock_read=read_timeout_s))
        self._background: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        await self._session.close()

    async def get_json(self, url: str) -> Any:
        async with self._session.get(url) as response:
            return await response.json()

    async def post_json(self, lease: Lease, path: str, body: dict[str, Any], *,
                        request_id: str, abort_ids: list[str]) -> dict[str, Any]:
        async with self._open(lease, path, body, request_id=request_id, abort_ids=abort_ids) as response:
            try:
                raw = await response.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise UpstreamLost(f"{lease.server}: {exc!r}") from exc
        return _reply(lease, raw)

    async def stream(self, lease: Lease, path: str, body: dict[str, Any], *, request_id: str,
                     abort_ids: list[str], ends_with_done: bool = True
                     ) -> AsyncIterator[tuple[str | None, dict[str, Any]]]:
        """The server's SSE events as ``(event name, data)`` up to (not including) ``[DONE]``;
        for streams without a ``[DONE]`` (Responses), up to the end of the body."""
        async with self._open(lease, path, body, request_id=request_id, abort_ids=abort_ids) as response:
            parser = SseParser()
            try:
                async for data in response.content.iter_any():
                    try:
                        events = parser.feed(data)
                    except UnicodeDecodeError as exc:
                        raise UpstreamLost(f"{lease.server}: stream is not UTF-8: {exc}", Loss.GARBAGE) from exc
                    for event in events:
                        if event.data == DONE:
                            return
                        yield event.event, _reply(lease, event.data)
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise UpstreamLost(f"{lease.server}: {exc!r}") from exc
        if ends_with_done or lease.cancelled:
            # Closed by our own cancel, or the server went away between two events.
            raise UpstreamLost(f"{lease.server}: stream ended before [DONE]")

    @contextlib.asynccontextmanager
    async def _open(self, lease: Lease, path: str, body: dict[str, Any], *, request_id: str,
                    abort_ids: list[str]) -> AsyncIterator[aiohttp.ClientResponse]:
        if lease.cancelled:
            raise UpstreamLost(f"{lease.server}: call cancelled")
        # vLLM names the request after X-Request-Id, which is what makes it abortable by id.
        headers = {"X-Request-Id": request_id, "Content-Type": "application/json"}
        try:
            response = await self._session.post(lease.url + path, data=wire_json.dumps(body), headers=headers)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise UpstreamLost(f"{lease.server}: {exc!r}") from exc
        lease.on_cancel(lambda: self._cancel(lease, response, abort_ids))
        try:
            if response.status >= 500:
                raise UpstreamLost(f"{lease.server}: HTTP {response.status}", Loss.ERROR)
            if response.status >= 400:
                raise UpstreamRejected(response.status, await response.read())
            yield response
        finally:
            response.release()

    def _cancel(self, lease: Lease, response: aiohttp.ClientResponse, abort_ids: list[str]) -> None:
        response.close()
        task = asyncio.get_running_loop().create_task(self._abort(lease.url, abort_ids))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _abort(self, url: str, abort_ids: list[str]) -> None:
        # Best effort: a server that is gone has nothing left to abort.
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
            async with self._session.post(url + "/abort_requests", json={"request_ids": abort_ids},
                                          timeout=aiohttp.ClientTimeout(total=5)):
                pass


def _reply(lease: Lease, raw: str | bytes) -> dict[str, Any]:
    """A reply or stream event as a JSON object; an error the server sends in place of one
    (vLLM does mid-stream) fails the call like a 5xx."""
    try:
        data = wire_json.loads(raw)
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON or bad UTF-8
        raise UpstreamLost(f"{lease.server}: reply is not JSON: {exc}", Loss.GARBAGE) from exc
    if not isinstance(data, dict):
        raise UpstreamLost(f"{lease.server}: reply is not a JSON object", Loss.GARBAGE)
    if data.get("error") or data.get("type") == "error" or data.get("object") == "error":
        raise UpstreamLost(f"{lease.server}: error in reply: {str(data)[:200]}", Loss.ERROR)
    return data
