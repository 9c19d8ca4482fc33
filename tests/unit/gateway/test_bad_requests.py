"""Every bad client or admin input is a 4xx naming what is wrong, never a 500 or a traceback,
and a refused admin body leaves the server set as it was."""

from __future__ import annotations

import asyncio
import json

import pytest

from fake_vllm import CHAT, TOKEN, FakeVllm, running, states

pytestmark = pytest.mark.usefixtures("no_traceback")

MESSAGES = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("body, param", [
    ({"name": 5, "url": "http://127.0.0.1:1"}, "name"),
    ({"name": "", "url": "http://127.0.0.1:1"}, "name"),
    ({"name": "a/b", "url": "http://127.0.0.1:1"}, "name"),
    ({"url": "http://127.0.0.1:1"}, "name"),
    ({"name": "x", "url": 5}, "url"),
    ({"name": "x", "url": "ftp://host"}, "url"),
    ({"name": "x", "url": "http://host:port"}, "url"),
    ({"name": "x", "url": "http://127.0.0.1:1", "weight_version": -1}, "weight_version"),
    ({"name": "x", "url": "http://127.0.0.1:1", "weight_version": "3"}, "weight_version"),
])
def test_a_bad_server_entry_is_refused_and_calls_keep_working(body, param):
    async def scenario():
        async with running(FakeVllm()) as h:
            status, text = await h.post("/admin/servers", body)
            after = await h.post("/v1/chat/completions", CHAT)
            return status, json.loads(text), after[0], states(h.gateway)
    status, reply, after, servers = asyncio.run(scenario())
    assert (status, reply["error"]["param"], after, servers) == (400, param, 200, {"s0": "active"})


@pytest.mark.parametrize("path, body, param", [
    ("/admin/servers/s0/drain", {"grace_s": "soon"}, "grace_s"),
    ("/admin/servers/s0/drain", {"grace_s": -1}, "grace_s"),
    ("/admin/servers/s0/drain", {"grace_s": True}, "grace_s"),
    ("/admin/servers/s0/weight_version", {"version": 1.5}, "version"),
    ("/admin/servers/s0/weight_version", {}, "version"),
])
def test_bad_drain_and_version_bodies_are_400(path, body, param):
    async def scenario():
        async with running(FakeVllm()) as h:
            status, text = await h.post(path, body)
            return status, json.loads(text), states(h.gateway)
    status, reply, servers = asyncio.run(scenario())
    assert (status, reply["error"]["param"], servers) == (400, param, {"s0": "active"})


def test_nan_grace_is_refused_as_json():
    async def scenario():
        async with running(FakeVllm()) as h:
            return await h.post("/admin/servers/s0/drain", data=b'{"grace_s": NaN}')
    assert asyncio.run(scenario())[0] == 400


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/admin/servers/nope/drain", {}),
    ("POST", "/admin/servers/nope/weight_version", {"version": 1}),
    ("DELETE", "/admin/servers/nope", None),
])
def test_an_unknown_server_is_404(method, path, body):
    async def scenario():
        async with running(FakeVllm()) as h:
            return (await h.post(path, body, method=method))[0], states(h.gateway)
    assert asyncio.run(scenario()) == (404, {"s0": "active"})


def test_a_non_utf8_authorization_header_is_400():
    async def scenario():
        async with running(FakeVllm()) as h:
            host, port = h.gateway.url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            body = json.dumps(CHAT).encode()
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                         + TOKEN.encode() + b"\xff\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
            answer = await reader.read()
            writer.close()
            return answer
    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 400")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["param"] == "Authorization"


@pytest.mark.parametrize("raw", [
    b"[" * 200_000 + b"]" * 200_000,
    b'{"model": "tiny", "messages": [], "temperature": NaN}',
    b'{"model": "tiny", "messages": [], "temperature": Infinity}',
    b'{"model": "tiny", "messages": [], "x": "\xff"}',
])
def test_unreadable_bodies_are_400(raw):
    async def scenario():
        async with running(FakeVllm()) as h:
            return await h.post("/v1/chat/completions", data=raw)
    status, text = asyncio.run(scenario())
    assert status == 400 and "not valid JSON" in json.loads(text)["error"]["message"]


@pytest.mark.parametrize("path, change, param", [
    ("/v1/chat/completions", {"stream_options": "x"}, "stream_options"),
    ("/v1/chat/completions", {"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options"),
    ("/v1/chat/completions", {"max_tokens": -1}, "max_tokens"),
    ("/v1/chat/completions", {"max_tokens": 10**30}, "max_tokens"),
    ("/v1/chat/completions", {"max_completion_tokens": 0}, "max_completion_tokens"),
    ("/v1/chat/completions", {"n": 0}, "n"),
    ("/v1/chat/completions", {"n": 129}, "n"),
    ("/v1/chat/completions", {"temperature": -0.5}, "temperature"),
    ("/v1/chat/completions", {"temperature": "<1e400>"}, "temperature"),  # a literal json reads as inf
    ("/v1/chat/completions", {"temperature": 10**400}, "temperature"),
    ("/v1/chat/completions", {"top_p": 0}, "top_p"),
    ("/v1/chat/completions", {"top_p": 1.5}, "top_p"),
    ("/v1/completions", {"prompt": "x", "max_tokens": -3}, "max_tokens"),
    ("/v1/responses", {"input": "x", "include": 5}, "include"),
    ("/v1/responses", {"input": "x", "max_output_tokens": -1}, "max_output_tokens"),
])
def test_out_of_range_openai_fields_are_400_naming_the_field(path, change, param):
    body = {**CHAT, **change} if path == "/v1/chat/completions" else {"model": "tiny", **change}
    raw = json.dumps(body).replace('"<1e400>"', "1e400").encode()

    async def scenario():
        async with running(FakeVllm()) as h:
            return await h.post(path, data=raw)
    status, text = asyncio.run(scenario())
    assert (status, json.loads(text)["error"]["param"]) == (400, param)


@pytest.mark.parametrize("change, param", [
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0]"),
    ({"messages": [5]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "messages[0]"),
    ({"tools": [1]}, "tools[0]"),
    ({"tools": [{"description": "no name"}]}, "tools[0]"),
    ({"tool_choice": {"type": "tool"}}, "tool_choice"),
    ({"system": [1]}, "system"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"stop_sequences": [1]}, "stop_sequences"),
])
def test_bad_anthropic_messages_are_400_in_anthropic_shape(change, param):
    async def scenario():
        async with running(FakeVllm()) as h:
            return await h.post("/v1/messages", {**MESSAGES, **change})
    status, text = asyncio.run(scenario())
    reply = json.loads(text)
    assert status == 400 and reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error"
    assert param in reply["error"]["message"] or param.split("[")[0] in reply["error"]["message"]


def test_good_requests_still_pass():
    async def scenario():
        async with running(FakeVllm()) as h:
            chat = await h.post("/v1/chat/completions", {**CHAT, "temperature": 0, "top_p": 1, "n": 1,
                                                         "stream_options": None})
            message = await h.post("/v1/messages", {**MESSAGES, "system": [{"type": "text", "text": "be"}],
                                                    "tools": [{"name": "f", "input_schema": {}}]})
            added = await h.post("/admin/servers", {"name": "node-1.b_2", "url": "http://127.0.0.1:9",
                                                    "weight_version": 0})
            drained = await h.post("/admin/servers/node-1.b_2/drain", {"grace_s": 0.5})
            return chat[0], message[0], added[0], drained[0]
    assert asyncio.run(scenario()) == (200, 200, 200, 200)
