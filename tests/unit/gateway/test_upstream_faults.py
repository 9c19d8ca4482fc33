"""A server that fails a call -- 5xx, garbage, a bad stream event, an error mid-stream -- moves
the call to another server; a 5xx excludes that server for that call only, garbage marks it
down for everyone; the client gets 502 (or an error event, mid-stream) only when no server
could finish the call, and the record says the call ended on an upstream error."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from gyrectl.gateway.capture import CLIENT_CLOSED, UPSTREAM_ERROR

from fake_vllm import CHAT, SERVER_KEY, FakeVllm, running, sse_data, states

pytestmark = pytest.mark.usefixtures("no_traceback")

STREAM = {**CHAT, "stream": True}


def test_one_500_moves_the_call_and_leaves_the_server_active():
    a, b = FakeVllm(script=["500"]), FakeVllm()

    async def scenario():
        async with running(a, b) as h:
            status, text = await h.post("/v1/chat/completions", CHAT)
            return status, json.loads(text), states(h.gateway), h.sink.records
    status, reply, servers, records = asyncio.run(scenario())
    assert status == 200 and reply["choices"][0]["message"]["content"] == "hi"
    assert servers == {"s0": "active", "s1": "active"}
    assert len(a.paths) == 1 and len(b.paths) == 1 and records[0].server == "s1"
    assert a.keys == b.keys == [f"Bearer {SERVER_KEY}"]  # every upstream call carries the server key


def test_one_500_on_the_only_server_is_retried_there():
    a = FakeVllm(script=["500"])

    async def scenario():
        async with running(a) as h:
            return (await h.post("/v1/chat/completions", CHAT))[0], states(h.gateway)
    assert asyncio.run(scenario()) == (200, {"s0": "active"})


def test_a_server_that_always_500s_gives_502_after_the_attempts_and_stays_active():
    a = FakeVllm(default="500")

    async def scenario():
        async with running(a, max_attempts=3) as h:
            status, text = await h.post("/v1/chat/completions", CHAT)
            return status, json.loads(text), states(h.gateway)
    status, reply, servers = asyncio.run(scenario())
    assert (status, reply["error"]["code"], servers, len(a.paths)) == (502, "bad_gateway", {"s0": "active"}, 3)


@pytest.mark.parametrize("mode", ["not_json", "no_index"])
def test_a_garbage_reply_marks_the_server_down_and_the_call_moves(mode):
    a, b = FakeVllm(script=[mode]), FakeVllm()

    async def scenario():
        async with running(a, b) as h:
            status, _ = await h.post("/v1/chat/completions", CHAT)
            return status, states(h.gateway)
    assert asyncio.run(scenario()) == (200, {"s0": "down", "s1": "active"})


@pytest.mark.parametrize("mode", ["not_json", "no_index"])
def test_garbage_from_the_only_server_is_502_at_once(mode):
    async def scenario():
        async with running(FakeVllm(default=mode), server_wait_s=30) as h:
            started = time.monotonic()
            status, text = await h.post("/v1/chat/completions", CHAT)
            return status, json.loads(text), time.monotonic() - started
    status, reply, took = asyncio.run(scenario())
    assert status == 502 and reply["error"]["type"] == "server_error" and took < 10


@pytest.mark.parametrize("mode", ["bad_json_event", "bad_utf8_event", "no_index"])
def test_a_bad_first_stream_event_moves_the_stream(mode):
    a, b = FakeVllm(script=[mode]), FakeVllm()

    async def scenario():
        async with running(a, b) as h:
            status, text = await h.post("/v1/chat/completions", STREAM)
            return status, sse_data(text), states(h.gateway), h.sink.records
    status, events, servers, records = asyncio.run(scenario())
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"])
    assert (status, text, events[-1], servers) == (200, "hi", "[DONE]", {"s0": "down", "s1": "active"})
    assert [(r.finish_reason, r.completion_token_ids) for r in records] == [("stop", (5, 6))]


def test_an_error_mid_stream_is_continued_on_another_server():
    a, b = FakeVllm(script=["error_mid"]), FakeVllm()

    async def scenario():
        async with running(a, b) as h:
            status, text = await h.post("/v1/chat/completions", STREAM)
            return status, sse_data(text), states(h.gateway), h.sink.records
    status, events, servers, [record] = asyncio.run(scenario())
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"])
    assert (status, text, events[-1], servers) == (200, "hi", "[DONE]", {"s0": "active", "s1": "active"})
    assert record.finish_reason == "stop" and [s["server"] for s in record.segments] == ["s0", "s1"]
    assert b.paths == ["/v1/completions"]


def test_an_error_mid_stream_no_server_can_finish_ends_with_an_error_event():
    a = FakeVllm(script=["error_mid"], default="500")

    async def scenario():
        async with running(a) as h:
            status, text = await h.post("/v1/chat/completions", STREAM)
            return status, sse_data(text), h.sink.records
    status, events, [record] = asyncio.run(scenario())
    assert status == 200 and events[0]["choices"][0]["delta"] == {"content": "h"}
    assert events[-2]["error"]["code"] == "bad_gateway" and events[-1] == "[DONE]"
    assert (record.finish_reason, record.completion_token_ids) == ("upstream_error", (5,))


def test_an_anthropic_stream_failing_mid_way_ends_with_an_error_event():
    a = FakeVllm(script=["error_mid"], default="500")

    async def scenario():
        async with running(a) as h:
            status, text = await h.post("/v1/messages", {"model": "tiny", "max_tokens": 4, "stream": True,
                                                         "messages": [{"role": "user", "content": "hi"}]})
            return status, text, h.sink.records
    status, text, [record] = asyncio.run(scenario())
    last = text.strip().split("\n\n")[-1].split("\n")
    assert status == 200 and last[0] == "event: error"
    assert json.loads(last[1].removeprefix("data: "))["error"]["type"] == "api_error"
    assert record.finish_reason == "upstream_error"


def test_record_reasons_keep_their_file_format_values():
    assert (CLIENT_CLOSED, UPSTREAM_ERROR) == ("client_closed", "upstream_error")  # file-format values


def test_a_garbage_responses_reply_moves_the_call():
    a, b = FakeVllm(script=["not_json"]), FakeVllm()

    async def scenario():
        async with running(a, b) as h:
            status, _ = await h.post("/v1/responses", {"model": "tiny", "input": "hi"})
            return status, states(h.gateway), h.sink.records
    status, servers, [record] = asyncio.run(scenario())
    assert (status, servers, record.completion_token_ids) == (200, {"s0": "down", "s1": "active"}, (5, 6))


def test_a_responses_stream_failing_after_events_ends_with_an_error_event():
    async def scenario():
        async with running(FakeVllm(default="garbage_mid")) as h:
            return await h.post("/v1/responses", {"model": "tiny", "input": "hi", "stream": True})
    status, text = asyncio.run(scenario())
    events = sse_data(text)
    assert status == 200 and events[0]["type"] == "response.created"
    assert events[-1]["error"]["code"] == "bad_gateway"
