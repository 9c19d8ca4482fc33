"""A fake rollout server (aiohttp) that plays vLLM's chat and completions routes and can be told
to answer badly, plus the real gateway in front of it, for the gateway's fault tests.

Each request takes the next mode from ``script`` (``default`` once it is empty):
``ok``, ``500``, ``not_json`` (a 200 that is no JSON), ``no_index`` (a choice without
``index``), ``bad_json_event`` / ``bad_utf8_event`` (a stream's first event), ``error_mid``
(one good chunk, then vLLM's mid-stream error event); on ``/v1/responses``, ``not_json`` (a
reply whose ``output`` is no list) and ``garbage_mid`` (one event, then one that is no JSON).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from gyrectl.capture.record import CallRecord
from gyrectl.gateway.app import Gateway
from gyrectl.gateway.settings import GatewaySettings

TOKEN = "test-client-token-of-the-fake-run"
ADMIN_TOKEN = "test-admin-token-of-the-fake-run"
SERVER_KEY = "test-server-key-of-the-fake-run"
PROMPT_IDS = [1, 2, 3]
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _chat_reply(mode: str) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": "hi"}, "token_ids": [5, 6],
              "logprobs": {"content": [{"token": "h", "logprob": -0.1}, {"token": "i", "logprob": -0.2}]},
              "finish_reason": "stop"}
    if mode == "no_index":
        del choice["index"]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "tiny",
            "prompt_token_ids": PROMPT_IDS, "choices": [choice],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def _chat_chunk(text: str, token: int, finish: str | None, *, first: bool = False) -> bytes:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "tiny",
             "choices": [{"index": 0, "delta": {"content": text}, "token_ids": [token],
                          "logprobs": {"content": [{"token": text, "logprob": -0.1}]}, "finish_reason": finish}]}
    if first:
        chunk["prompt_token_ids"] = PROMPT_IDS
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


_ERROR_EVENT = b'data: {"error": {"message": "boom", "type": "InternalServerError", "code": 500}}\n\n'
_DONE = b"data: [DONE]\n\n"


@dataclass
class FakeVllm:
    script: list[str] = field(default_factory=list)
    default: str = "ok"
    paths: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    """The ``Authorization`` header of each request (the server key, when the gateway sends it)."""
    bodies: list[Any] = field(default_factory=list)
    url: str = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.paths.append(request.path)
        self.bodies.append(body)
        self.keys.append(request.headers.get("Authorization", ""))
        mode = self.script.pop(0) if self.script else self.default
        if mode == "500":
            return web.Response(status=500, text="Internal Server Error")
        if mode == "not_json":
            return web.Response(status=200, text="<html>oops</html>", content_type="text/html")
        if request.path == "/v1/responses":
            return await _responses(request, body, mode)
        if not body.get("stream"):
            return web.json_response(_chat_reply(mode))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if mode == "bad_json_event":
            await response.write(b"data: {not json\n\n" + _DONE)
        elif mode == "bad_utf8_event":
            await response.write(b"data: \xff\xfe\n\n" + _DONE)
        elif request.path == "/v1/completions":  # a continuation: the rest of the choice
            piece = {"choices": [{"index": 0, "text": "i", "token_ids": [6],
                                  "logprobs": {"token_logprobs": [-0.2]}, "finish_reason": "stop"}]}
            await response.write(b"data: " + json.dumps(piece).encode() + b"\n\n" + _DONE)
        elif mode == "no_index":
            await response.write(b'data: {"choices": [{"delta": {"content": "h"}}]}\n\n' + _DONE)
        elif mode == "error_mid":
            await response.write(_chat_chunk("h", 5, None, first=True) + _ERROR_EVENT + _DONE)
        else:
            await response.write(_chat_chunk("h", 5, None, first=True) + _chat_chunk("i", 6, "stop") + _DONE)
        await response.write_eof()
        return response


_RESPONSE = {"id": "resp_1", "object": "response", "status": "completed", "error": None,
             "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi", "logprobs": []}]}],
             "input_messages": [{"tokens": PROMPT_IDS}], "output_messages": [{"tokens": [5, 6]}]}


async def _responses(request: web.Request, body: dict[str, Any], mode: str) -> web.StreamResponse:
    """vLLM's Responses API: the reply, or its stream (``garbage_mid``: one event, then no JSON)."""
    if not body.get("stream"):
        return web.json_response({**_RESPONSE, "output": 5} if mode == "not_json" else _RESPONSE)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    created = {"type": "response.created", "response": {**_RESPONSE, "status": "in_progress"}}
    await response.write(b"event: response.created\ndata: " + json.dumps(created).encode() + b"\n\n")
    if mode == "garbage_mid":
        await response.write(b"event: response.output_text.delta\ndata: {not json\n\n")
    else:
        completed = {"type": "response.completed", "response": _RESPONSE}
        await response.write(b"event: response.completed\ndata: " + json.dumps(completed).encode() + b"\n\n")
    await response.write_eof()
    return response


class ListSink:
    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    def record_many(self, calls: list[CallRecord]) -> None:
        self.records.extend(calls)


@dataclass
class Harness:
    gateway: Gateway
    sink: ListSink
    session: aiohttp.ClientSession

    async def post(self, path: str, body: Any = None, *, data: bytes | None = None,
                   headers: dict[str, str] | None = None, method: str = "POST") -> tuple[int, str]:
        raw = data if data is not None else (json.dumps(body).encode() if body is not None else None)
        key = ADMIN_TOKEN if path.startswith("/admin/") else TOKEN
        async with self.session.request(method, self.gateway.url + path, data=raw,
                                        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                                                 **(headers or {})}) as response:
            return response.status, await response.text()


async def serve(server: FakeVllm) -> web.AppRunner:
    """Listens for ``server`` on a free port of 127.0.0.1 (its ``url``); cleanup the runner to stop."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", server._handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    return runner


@contextlib.asynccontextmanager
async def running(*servers: FakeVllm, **settings: Any) -> AsyncIterator[Harness]:
    """The gateway with ``servers`` added as ``s0``, ``s1``, ..."""
    runners = [await serve(server) for server in servers]
    sink = ListSink()
    gateway = Gateway(GatewaySettings(token=TOKEN, admin_token=ADMIN_TOKEN, server_key=SERVER_KEY,
                                      **{"max_attempts": 3, "server_wait_s": 1.0, **settings}), sink=sink)
    await gateway.start()
    for i, server in enumerate(servers):
        gateway.pool.add(f"s{i}", server.url)
    try:
        async with aiohttp.ClientSession() as session:
            yield Harness(gateway, sink, session)
    finally:
        await gateway.stop()
        for runner in runners:
            await runner.cleanup()


def states(gateway: Gateway) -> dict[str, str]:
    return {view.name: view.state.value for view in gateway.pool.views()}


def sse_data(text: str) -> list[Any]:
    """The ``data`` of each event in an SSE body (``[DONE]`` as the string)."""
    out = []
    for block in text.strip().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                payload = line[6:]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
