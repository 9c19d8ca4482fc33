"""SSE parsing, request rewriting and reply stripping, auth and validation: pure wire logic."""

import json

import pytest
from hypothesis import given, strategies as st

from gyrectl.gateway import anthropic, chat, completions, responses
from gyrectl.gateway.auth import identify
from gyrectl.gateway.capture import ChoiceCapture, reply_problem
from gyrectl.gateway.continuation import continuation_body
from gyrectl.gateway.errors import GatewayError
from gyrectl.gateway.pool import Lease
from gyrectl.gateway.sse import SseParser, encode
from gyrectl.gateway.validate import check_request, parse_body

LEASE = Lease("a", "http://a", 7)


@given(st.lists(st.dictionaries(st.text(max_size=5), st.integers(), max_size=3), max_size=6),
       st.integers(min_value=1, max_value=50))
def test_sse_reassembles_events_split_anywhere(payloads, cut):
    wire = b"".join(encode(p, "ev") for p in payloads).replace(b"\n", b"\r\n")
    parser = SseParser()
    events = [e for i in range(0, len(wire), cut) for e in parser.feed(wire[i:i + cut])]
    assert [json.loads(e.data) for e in events] == payloads and all(e.event == "ev" for e in events)


def test_chat_asks_for_capture_and_hides_it():
    body, asked = chat.upstream_request({"model": "m", "messages": [], "x_vendor": {"k": 1}})
    assert body["return_token_ids"] and body["logprobs"] and body["x_vendor"] == {"k": 1}
    reply = {"prompt_token_ids": [1, 2], "choices": [{"index": 0, "token_ids": [3], "message": {"content": "x"},
                                                      "logprobs": {"content": [{"logprob": -1.0}]},
                                                      "finish_reason": "stop"}]}
    captures = {}
    chat.absorb_response(reply, captures, LEASE)
    assert (captures[0].prompt_ids, captures[0].token_ids, captures[0].logprobs) == ([1, 2], [3], [-1.0])
    out = chat.strip_response(reply, asked)
    assert ("prompt_token_ids" not in out and "token_ids" not in out["choices"][0]
            and out["choices"][0]["logprobs"] is None)


def test_chat_chunks_hide_aborts_and_empty_deltas():
    _, asked = chat.upstream_request({"model": "m", "messages": []})
    withheld = {"choices": [{"index": 0, "delta": {}, "token_ids": [5], "finish_reason": None}]}
    aborted = {"choices": [{"index": 0, "delta": {}, "token_ids": [], "finish_reason": "abort"}]}
    assert chat.strip_chunk(withheld, asked) is None and chat.strip_chunk(aborted, asked) is None
    captures = {}
    chat.absorb_chunk(aborted, captures, LEASE)
    assert not captures[0].finished


def test_completions_logprobs_zero_still_captures():
    body, asked = completions.upstream_request({"model": "m", "prompt": "x"})
    assert body["logprobs"] == 0 and asked.logprobs is None


def test_continuation_carries_sampling_and_shrinks_budget():
    body = continuation_body({"model": "m", "temperature": 0.7, "max_tokens": 10, "stop": ["\n"], "tools": []},
                             prompt_ids=[1, 2], delivered=[3, 4, 5], top_logprobs=0)
    assert body == {"model": "m", "temperature": 0.7, "stop": ["\n"], "max_tokens": 7, "prompt": [1, 2, 3, 4, 5],
                    "n": 1, "stream": True, "return_token_ids": True, "logprobs": 0}


def test_continuation_chunk_is_a_chat_chunk():
    _, asked = chat.upstream_request({"model": "m", "messages": [], "logprobs": True, "top_logprobs": 1})
    piece = {"text": "hi", "token_ids": [9], "finish_reason": None,
             "logprobs": {"tokens": ["hi"], "token_logprobs": [-0.5], "top_logprobs": [{"hi": -0.5, "yo": -1.0}]}}
    out = chat.continuation_chunk({"id": "chatcmpl-1", "created": 1, "model": "m"}, 2, piece, asked)
    [choice] = out["choices"]
    assert out["id"] == "chatcmpl-1" and choice["index"] == 2 and choice["delta"] == {"content": "hi"}
    assert choice["logprobs"]["content"][0]["top_logprobs"] == [{"token": "hi", "logprob": -0.5, "bytes": [104, 105]}]


def test_capture_segments_mark_where_a_server_took_over():
    cap = ChoiceCapture(0)
    cap.on_server(LEASE)
    cap.add_tokens([1, 2], [-1.0, -1.0])
    cap.on_server(Lease("b", "http://b", 8))
    assert cap.segments == [{"server": "a", "weight_version": 7, "start": 0},
                            {"server": "b", "weight_version": 8, "start": 2}]


def test_responses_capture_fields_are_hidden():
    body, asked = responses.upstream_request({"model": "m", "input": "x"})
    assert body["enable_response_messages"] and "message.output_text.logprobs" in body["include"]
    reply = {"input_messages": [{"tokens": [1]}], "output_messages": [{"tokens": [2]}], "status": "completed",
             "output": [{"type": "message", "content": [{"type": "output_text", "logprobs": [{"logprob": -2.0}]}]}]}
    out = responses.strip_response(reply, asked)
    assert "input_messages" not in out and out["output"][0]["content"][0]["logprobs"] == []


def test_anthropic_request_becomes_chat():
    chat_body = anthropic.to_chat_request({
        "model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "sys"}], "stop_sequences": ["END"],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "q"},
                     {"role": "assistant", "content": [{"type": "text", "text": "a"},
                                                       {"type": "tool_use", "id": "t1", "name": "f",
                                                        "input": {"x": 1}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}],
        "vendor_field": 3})
    assert chat_body["messages"] == [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"x": 1})}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "ok"}]
    assert chat_body["tool_choice"] == "required" and chat_body["stop"] == ["END"] and chat_body["vendor_field"] == 3


def test_anthropic_stream_events_in_order():
    translator = anthropic.StreamTranslator()
    chunks = [{"id": "chatcmpl-1", "model": "m",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
              {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
              {"choices": [{"index": 0,
                            "delta": {"tool_calls": [{"index": 0, "id": "c",
                                                      "function": {"name": "f", "arguments": "{}"}}]},
                            "finish_reason": "tool_calls"}]},
              {"choices": [], "usage": {"completion_tokens": 3}}]
    events = [e for c in chunks for e in translator.feed(c)] + list(translator.finish())
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" and events[-2][1]["usage"]["output_tokens"] == 3


@pytest.mark.parametrize(("path", "key", "expected"), [
    ("/x/e1/v1/chat/completions", "tok", ("e1", "main", "/v1/chat/completions")),
    ("/x/e1/subagent/v1/messages", "tok", ("e1", "subagent", "/v1/messages")),
    ("/v1/models", "tok.e2", ("e2", "main", "/v1/models")),
    ("/v1/models", "tok", ("unattributed", "main", "/v1/models")),
])
def test_identify(path, key, expected):
    caller = identify(path, key, "tok")
    assert (caller.execution, caller.role, caller.api_path) == expected


def test_identify_refuses_a_wrong_token():
    assert identify("/v1/models", "nope.e1", "tok") is None and identify("/v1/models", "", "tok") is None


@pytest.mark.parametrize(("raw", "param", "status"), [
    (b"{", None, 400), (b"3", None, 400),
    (b'{"model": "m", "messages": [], "stream": "yes"}', "stream", 400),
    (b'{"model": "m", "messages": [], "n": 0}', "n", 400),
    (b'{"model": "other", "messages": []}', "model", 404),
])
def test_validation(raw, param, status):
    with pytest.raises(GatewayError) as caught:
        check_request("chat", parse_body(raw), ("m",))
    assert (caught.value.param, caught.value.status) == (param, status)


@pytest.mark.parametrize("reply, whole", [
    ({"choices": []}, True),
    ({"choices": [{"token_ids": [1]}]}, False),
    ({"choices": [{"index": "0"}]}, False),
    ({"choices": [5]}, False),
    ({"prompt_token_ids": ["a"], "choices": []}, False),
    ({"choices": [{"index": 0, "token_ids": [True]}]}, False),
    ({"choices": [{"index": 0, "logprobs": {"content": [{"logprob": "x"}]}}]}, False),
    ({"choices": [{"index": 0, "logprobs": {"tokens": [5], "token_logprobs": [-1.0]}}]}, False),
    ({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 10**9}]}}]}, False),
    ({"choices": [{"index": 0, "message": {"tool_calls": [{"function": {"name": 5}}]}}]}, True),
])
def test_unreadable_upstream_replies_are_named(reply, whole):
    assert reply_problem(reply, whole=whole) is not None


def test_a_vllm_shaped_reply_is_readable():
    chunk = {"choices": [{"index": 0, "text": "a", "token_ids": [3], "finish_reason": None,
                          "logprobs": {"tokens": ["a"], "token_logprobs": [-0.1], "top_logprobs": [{"a": -0.1}]}}]}
    assert reply_problem(chunk, whole=False) is None
    assert reply_problem({"choices": [], "usage": {}}, whole=False) is None
