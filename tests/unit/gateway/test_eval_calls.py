"""What the gateway does for an evaluation's calls: the sampling fields it was told to set win
over the harness's (greedy with several choices sent as vLLM takes it), and a call pinned to a
weights version goes only to a server serving it."""

from __future__ import annotations

import asyncio
import json

import pytest

from gyrectl.gateway.sampling import ARGMAX, impose

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


def test_greedy_with_several_choices_goes_up_as_top_k_1_and_only_when_the_gateway_imposed_it():
    """vLLM answers 400 to n > 1 at temperature 0; an evaluation's imposed greedy sampling must
    not break the harness's n=2 call, so that call asks for the argmax another way."""
    server = FakeVllm()

    async def scenario():
        async with running(server) as h:
            h.gateway.sampling["eval-v0-0000"] = {"temperature": 0.0}
            replies = [await h.post("/x/eval-v0-0000/v1/chat/completions", {**CHAT, "n": 2, "temperature": 1.3}),
                       await h.post("/x/eval-v0-0000/v1/completions",
                                    {"model": "tiny", "prompt": [1, 2], "max_tokens": 2, "n": 3}),
                       await h.post("/x/eval-v0-0000/v1/chat/completions", CHAT),
                       await h.post("/x/e000001/v1/chat/completions", {**CHAT, "n": 2, "temperature": 0.0})]
            return replies
    replies = asyncio.run(scenario())
    assert [status for status, _ in replies] == [200] * 4
    sent = [{k: body.get(k) for k in ("temperature", "top_k", "n")} for body in server.bodies]
    assert sent == [{"temperature": 1.0, "top_k": 1, "n": 2}, {"temperature": 1.0, "top_k": 1, "n": 3},
                    {"temperature": 0.0, "top_k": None, "n": None},  # one choice: greedy as imposed
                    {"temperature": 0.0, "top_k": None, "n": 2}]  # the harness's own request: as it sent it


def test_impose_is_greedy_n_only_under_vllms_greedy_threshold():
    body = {"n": 2, "top_k": 50, "temperature": 0.7}
    assert impose(body, {"temperature": 0}) == {"n": 2, **ARGMAX}
    assert impose(body, {"temperature": 1e-6}) == {"n": 2, **ARGMAX}  # vLLM: greedy below 1e-5
    assert impose(body, {"temperature": 0.2}) == {"n": 2, "top_k": 50, "temperature": 0.2}
    assert impose(body, {}) == body


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
