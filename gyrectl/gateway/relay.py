"""Calls the gateway relays as they are, only re-sent elsewhere while the client has seen
nothing: ``/v1/responses`` (see ``responses`` for why)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from gyrectl.gateway import responses
from gyrectl.gateway.capture import CallContext
from gyrectl.gateway.engine import EngineDeps
from gyrectl.gateway.errors import Loss, UpstreamLost
from gyrectl.gateway.pool import Lease
from gyrectl.gateway.retry import Attempts


async def respond(deps: EngineDeps, ctx: CallContext, body: dict[str, Any]) -> dict[str, Any]:
    upstream_body, asked = responses.upstream_request(body)
    attempts = Attempts(deps.pool, ctx.execution, deps.max_attempts)
    async for attempt in attempts:
        async with attempt as lease:
            request_id = uuid.uuid4().hex
            reply = _readable(lease, await deps.upstream.post_json(
                lease, responses.PATH, upstream_body, request_id=request_id, abort_ids=[f"resp_{request_id}"]))
            await deps.records.commit([responses.record_of(ctx, reply, lease)])
            return responses.strip_response(reply, asked)
    raise attempts.gave_up()


async def stream(deps: EngineDeps, ctx: CallContext,
                 body: dict[str, Any]) -> AsyncIterator[tuple[str | None, dict[str, Any]]]:
    """The client's events as ``(event name, data)``."""
    upstream_body, asked = responses.upstream_request(body)
    attempts = Attempts(deps.pool, ctx.execution, deps.max_attempts)
    async for attempt in attempts:
        async with attempt as lease:
            request_id = uuid.uuid4().hex
            async for name, data in deps.upstream.stream(
                    lease, responses.PATH, upstream_body, request_id=request_id,
                    abort_ids=[f"resp_{request_id}"], ends_with_done=False):
                if data.get("type") == "response.completed":
                    await deps.records.commit([responses.record_of(ctx, _readable(lease, data.get("response")), lease)])
                lease.movable = False  # the client has seen events, which cannot be re-made elsewhere
                yield name, responses.strip_event(data, asked)
            return
    raise attempts.gave_up()


def _readable(lease: Lease, reply: Any) -> dict[str, Any]:
    if (problem := responses.reply_problem(reply)) is not None:
        raise UpstreamLost(f"{lease.server}: {problem}", Loss.GARBAGE)
    return reply
