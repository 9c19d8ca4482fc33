"""Runs one client call of a token-generating API to its end, across servers if need be.

    acquire a lease (routing) --> send (chat / completions, with capture fields)
        |                              |
        |   server lost before the     |   server lost mid-stream (drain grace over,
        |   client saw anything:       |   removed, reset, timed out, aborted):
        +<-- re-send the whole call ---+-- continue each unfinished choice token-in/token-out
                                       |   on another server, same stream for the client
                                       v
                          finished: one CallRecord per choice, durable (commit)

The client never sees a lost server; it sees an error only if every attempt fails (``retry``
says which servers an attempt may use and what a failure means for the server).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gyrectl.capture.record import CallRecord
from gyrectl.gateway import capture as cap
from gyrectl.gateway.commit import GroupCommit
from gyrectl.gateway.continuation import continuation_body, remaining_tokens
from gyrectl.gateway.errors import GatewayError, Loss, UpstreamLost
from gyrectl.gateway.pool import Lease, ServerPool
from gyrectl.gateway.retry import Attempts
from gyrectl.gateway.upstream import Upstream, UpstreamRejected

CONTINUATION_PATH = "/v1/completions"


@dataclass(frozen=True)
class EngineDeps:
    pool: ServerPool
    upstream: Upstream
    records: GroupCommit
    max_attempts: int
    """Servers one call may try (``GatewaySettings.max_attempts``)."""


class Generation:
    """One call; ``api`` is the module of its wire format (``chat`` or ``completions``)."""

    def __init__(self, deps: EngineDeps, ctx: cap.CallContext, api: ModuleType, body: dict[str, Any]):
        self.deps, self.ctx, self.api, self.request = deps, ctx, api, body
        self.upstream_body, self.asked = api.upstream_request(body)
        self.captures: dict[int, cap.ChoiceCapture] = {}

    async def respond(self) -> dict[str, Any]:
        """Non-streaming: nothing reaches the client before the end, so a lost server just
        means sending the whole call again elsewhere."""
        attempts = self._attempts()
        async for attempt in attempts:
            async with attempt as lease:
                request_id = uuid.uuid4().hex
                response = _readable(lease, await self.deps.upstream.post_json(
                    lease, self.api.PATH, self.upstream_body, request_id=request_id,
                    abort_ids=self._abort_ids(request_id)), whole=True)
                captures: dict[int, cap.ChoiceCapture] = {}
                self.api.absorb_response(response, captures, lease)
                if any(not c.finished for c in captures.values()):
                    raise UpstreamLost(f"{lease.server}: call aborted", Loss.ENDED)
                self.captures = captures
                await self._record()
                return self.api.strip_response(response, self.asked)
        raise attempts.gave_up()

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        """Streaming: yields the client's chunks (without ``[DONE]``); records at the end, also
        when the client goes away early or the call fails (with an error event for the client)."""
        header: dict[str, Any] | None = None
        unfinished = cap.CLIENT_CLOSED
        try:
            attempts = self._attempts()
            async for attempt in attempts:
                async with attempt as lease:
                    if header is None:
                        async for chunk in self._first_attempt(lease):
                            header = header or {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
                            yield chunk
                    else:
                        async for chunk in self._continue(lease, header):
                            yield chunk
                    if self.captures and all(c.finished for c in self.captures.values()):
                        break
                    raise UpstreamLost(f"{lease.server}: stream ended early", Loss.ENDED)
            else:
                raise attempts.gave_up()
            if self.asked.include_usage and header is not None:
                yield self.api.usage_chunk(header, self.captures)
            await self._record()  # the client's end of stream follows a durable record
        except (GatewayError, UpstreamRejected):
            unfinished = cap.UPSTREAM_ERROR
            raise
        finally:
            if self.captures:  # cut short: kept all the same, nobody left to wait for it
                self.deps.records.commit_later(self._take_records(unfinished))

    async def _first_attempt(self, lease: Lease) -> AsyncIterator[dict[str, Any]]:
        request_id = uuid.uuid4().hex
        sent = False
        try:
            async for _, chunk in self.deps.upstream.stream(
                    lease, self.api.PATH, self.upstream_body, request_id=request_id,
                    abort_ids=self._abort_ids(request_id)):
                _readable(lease, chunk, whole=False)
                if chunk.get("usage") and not chunk.get("choices"):
                    continue  # the gateway sends its own usage chunk, right for resumed calls too
                self.api.absorb_chunk(chunk, self.captures, lease)
                out = self.api.strip_chunk(chunk, self.asked)
                if out is not None:
                    sent = True
                    yield out
        except UpstreamLost:
            if not sent:
                self.captures.clear()  # the client saw nothing: start over cleanly elsewhere
            raise

    async def _continue(self, lease: Lease, header: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        for choice in [c for c in self.captures.values() if not c.finished]:
            if choice.prompt_ids is None:
                raise UpstreamLost("prompt ids unknown")  # cannot happen once a chunk was sent
            if (remaining_tokens(self.request, len(choice.token_ids)) or 1) <= 0:
                choice.finish("length")
                yield self.api.continuation_chunk(header, choice.index, {"finish_reason": "length"}, self.asked)
                continue
            choice.on_server(lease)
            body = continuation_body(self.request, prompt_ids=choice.prompt_ids,
                                     delivered=choice.token_ids, top_logprobs=self.asked.top_logprobs)
            request_id = uuid.uuid4().hex
            async for _, data in self.deps.upstream.stream(
                    lease, CONTINUATION_PATH, body, request_id=request_id,
                    abort_ids=[f"cmpl-{request_id}-0", f"cmpl-{request_id}"]):
                for piece in _readable(lease, data, whole=False).get("choices", ()):
                    choice.add_tokens(piece.get("token_ids"),
                                      (piece.get("logprobs") or {}).get("token_logprobs"))
                    choice.finish(piece.get("finish_reason"))
                    if piece.get("finish_reason") == cap.ABORTED:
                        piece = {**piece, "finish_reason": None}
                    if piece.get("text") or piece.get("finish_reason"):
                        yield self.api.continuation_chunk(header, choice.index, piece, self.asked)

    def _attempts(self) -> Attempts:
        return Attempts(self.deps.pool, self.ctx.execution, self.deps.max_attempts)

    def _abort_ids(self, request_id: str) -> list[str]:
        prefixed = self.api.ABORT_PREFIX + request_id
        # Completions name each prompt's sub-request "<id>-<i>"; chat has just the one.
        return [prefixed] + [f"{prefixed}-{i}" for i in range(_num_prompts(self.request))]

    async def _record(self) -> None:
        await self.deps.records.commit(self._take_records(cap.CLIENT_CLOSED))

    def _take_records(self, unfinished: str) -> list[CallRecord]:
        records = cap.records(self.ctx, self.captures, unfinished=unfinished)
        self.captures = {}
        return records


def _readable(lease: Lease, reply: dict[str, Any], *, whole: bool) -> dict[str, Any]:
    if (problem := cap.reply_problem(reply, whole=whole)) is not None:
        raise UpstreamLost(f"{lease.server}: {problem}", Loss.GARBAGE)
    return reply


def _num_prompts(request: dict[str, Any]) -> int:
    prompt = request.get("prompt")
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        return len(prompt)
    return 1 if "prompt" in request else 0
