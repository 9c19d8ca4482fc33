"""Calls the gateway relays as they are, only re-sent elsewhere while the client has seen
nothing: ``/v1/responses`` (see ``responses`` for why)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from gyrectl.gateway import responses
from gyrectl.gateway.capture import CallContext
from gyrectl.gateway.engine import EngineDeps
from gyrectl.gateway.errors import UpstreamLost, unavailable


async def respond(deps: EngineDeps, ctx: CallContext, body: dict[str, Any]) -> dict[str, Any]:
    upstream_body, asked = responses.upstream_request(body)
    failed: set[str] = set()
    for _ in range(deps.max_attempts):
        lease = await deps.pool.acquire(ctx.execution, exclude=failed)
        try:
            request_id = uuid.uuid4().hex
            reply = await deps.upstream.post_json(lease, responses.PATH, upstream_body,
                                                  request_id=request_id, abort_ids=[f"resp_{request_id}"])
            deps.sink.record(responses.record_of(ctx, reply, lease))
            return responses.strip_response(reply, asked)
        except UpstreamLost:
            failed.add(lease.server)
            deps.pool.report_failure(lease)
        finally:
            deps.pool.release(lease)
    raise unavailable("Every rollout server tried for this call failed; try again.")


async def stream(deps: EngineDeps, ctx: CallContext,
                 body: dict[str, Any]) -> AsyncIterator[tuple[str | None, dict[str, Any]]]:
    """The client's events as ``(event name, data)``."""
    upstream_body, asked = responses.upstream_request(body)
    failed: set[str] = set()
    for _ in range(deps.max_attempts):
        lease = await deps.pool.acquire(ctx.execution, exclude=failed)
        try:
            request_id = uuid.uuid4().hex
            async for event in deps.upstream.stream(
                    lease, responses.PATH, upstream_body, request_id=request_id,
                    abort_ids=[f"resp_{request_id}"], ends_with_done=False):
                data = event.json()
                if data.get("type") == "response.completed":
                    deps.sink.record(responses.record_of(ctx, data["response"], lease))
                lease.movable = False  # the client has seen events: this call stays put
                yield event.event, responses.strip_event(data, asked)
            return
        except UpstreamLost:
            if not lease.movable:
                raise
            failed.add(lease.server)
            deps.pool.report_failure(lease)
        finally:
            deps.pool.release(lease)
    raise unavailable("Every rollout server tried for this call failed; try again.")

