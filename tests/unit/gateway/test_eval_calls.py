"""What the gateway does for an evaluation's calls: the sampling fields it was told to set win
over the harness's, and a call pinned to a weights version goes only to a server serving it."""

from __future__ import annotations

import asyncio
import json

import pytest

from fake_vllm import CHAT, FakeVllm, running

pytestmark = pytest.mark.usefixtures("no_traceback")


def test_an_evaluations_temperature_wins_over_the_harnesses_and_only_for_it():
    server = FakeVllm()

    async def scenario():
        async with running(server) as h:
            h.gateway.sampling["eval-v2-0000"] = {"temperature": 0.0}
            await h.post("/x/eval-v2-0000/v1/chat/completions", {**CHAT, "temperature": 1.3})
            await h.post("/x/e000001/v1/chat/completions", {**CHAT, "temperature": 1.3})
    asyncio.run(scenario())
    assert [body.get("temperature") for body in server.bodies] == [0.0, 1.3]


def test_a_pinned_call_goes_only_to_a_server_serving_its_version():
    old, new = FakeVllm(), FakeVllm()

    async def scenario():
        async with running(old, new, server_wait_s=1.0) as h:
            h.gateway.pool.set_weight_version("s0", 1)
            h.gateway.pool.set_weight_version("s1", 2)
            h.gateway.pool.pin_version("eval-v2-0000", 2)
            replies = [await h.post("/x/eval-v2-0000/v1/chat/completions", CHAT) for _ in range(4)]
            h.gateway.pool.pin_version("eval-v3-0000", 3)  # nobody serves v3 yet: the call waits, then 503
            waited = await h.post("/x/eval-v3-0000/v1/chat/completions", CHAT)
            return replies, waited
    replies, waited = asyncio.run(scenario())
    assert [status for status, _ in replies] == [200] * 4
    assert len(new.paths) == 4 and old.paths == []
    assert waited[0] == 503 and "No rollout server" in json.loads(waited[1])["error"]["message"]
