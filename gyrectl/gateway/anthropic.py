"""The Anthropic Messages API (``/v1/messages``) spoken over chat completions (pure).

vLLM drops unknown fields on its own ``/v1/messages`` and returns no token ids there, so the
gateway converts: a Messages request becomes a chat request (which the engine captures,
routes and resumes like any other), and the chat reply or stream becomes a Messages reply or
event stream. The conversion follows Anthropic's documented mapping of roles, content blocks
(text, tool_use, tool_result), tools and tool_choice; fields it does not know are passed on
to the chat request untouched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

_KNOWN = {"model", "messages", "system", "max_tokens", "stop_sequences", "stream", "tools",
          "tool_choice", "metadata", "temperature", "top_p", "top_k", "thinking", "service_tier"}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def to_chat_request(body: dict[str, Any]) -> dict[str, Any]:
    chat: dict[str, Any] = {k: v for k, v in body.items() if k not in _KNOWN}
    messages = []
    if body.get("system"):
        messages.append({"role": "system", "content": _text_of(body["system"])})
    for message in body["messages"]:
        messages.extend(_chat_messages(message))
    chat.update(model=body["model"], messages=messages, max_tokens=body["max_tokens"],
                stream=bool(body.get("stream")))
    for key in ("temperature", "top_p", "top_k"):
        if key in body:
            chat[key] = body[key]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if body.get("tools"):
        chat["tools"] = [{"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""),
            "parameters": t.get("input_schema", {"type": "object"})}} for t in body["tools"]]
    if body.get("tool_choice"):
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    return chat


def to_message(response: dict[str, Any]) -> dict[str, Any]:
    """A chat completion (one choice) as an Anthropic Message."""
    choice = response["choices"][0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                        "input": _arguments(function.get("arguments"))})
    usage = response.get("usage") or {}
    return {"id": _message_id(response), "type": "message", "role": "assistant",
            "model": response.get("model"), "content": content,
            "stop_reason": _stop_reason(choice), "stop_sequence": _stop_sequence(choice),
            "usage": {"input_tokens": usage.get("prompt_tokens", 0),
                      "output_tokens": usage.get("completion_tokens", 0)}}


class StreamTranslator:
    """Turns chat chunks (one choice) into Anthropic stream events: ``(event, data)`` pairs."""

    def __init__(self) -> None:
        self._started = False
        self._block: tuple[str, int] | None = None  # ("text", -1) or ("tool", tool index)
        self._num_blocks = 0
        self._output_tokens = 0
        self._stop: dict[str, Any] | None = None

    def feed(self, chunk: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        if not self._started:
            self._started = True
            yield "message_start", {"type": "message_start", "message": {
                "id": _message_id(chunk), "type": "message", "role": "assistant",
                "model": chunk.get("model"), "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}}
        if chunk.get("usage"):
            self._output_tokens = chunk["usage"].get("completion_tokens", 0)
        for choice in chunk.get("choices", ()):
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield from self._open(("text", -1), {"type": "text", "text": ""})
                yield "content_block_delta", {"type": "content_block_delta", "index": self._num_blocks - 1,
                                              "delta": {"type": "text_delta", "text": delta["content"]}}
            for call in delta.get("tool_calls") or ():
                block = ("tool", call.get("index", 0))
                function = call.get("function") or {}
                yield from self._open(block, {"type": "tool_use", "id": call.get("id"),
                                              "name": function.get("name"), "input": {}})
                if function.get("arguments"):
                    yield "content_block_delta", {
                        "type": "content_block_delta", "index": self._num_blocks - 1,
                        "delta": {"type": "input_json_delta", "partial_json": function["arguments"]}}
            if choice.get("finish_reason"):
                self._stop = choice

    def finish(self) -> Iterator[tuple[str, dict[str, Any]]]:
        yield from self._close()
        stop = self._stop or {}
        yield "message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": _stop_reason(stop), "stop_sequence": _stop_sequence(stop)},
                                "usage": {"output_tokens": self._output_tokens}}
        yield "message_stop", {"type": "message_stop"}

    def _open(self, block: tuple[str, int], start: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        if self._block == block:
            return
        yield from self._close()
        self._block = block
        yield "content_block_start", {"type": "content_block_start", "index": self._num_blocks,
                                      "content_block": start}
        self._num_blocks += 1

    def _close(self) -> Iterator[tuple[str, dict[str, Any]]]:
        if self._block is not None:
            yield "content_block_stop", {"type": "content_block_stop", "index": self._num_blocks - 1}
            self._block = None


def _chat_messages(message: dict[str, Any]) -> list[dict[str, Any]]:
    role, content = message["role"], message["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    out: list[dict[str, Any]] = []
    texts = [b["text"] for b in content if b.get("type") == "text"]
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
             for b in content if b.get("type") == "tool_use"]
    # Tool results answer the previous assistant turn, so they come before this turn's text.
    for block in content:
        if block.get("type") == "tool_result":
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                        "content": _text_of(block.get("content", ""))})
    if texts or calls:
        chat: dict[str, Any] = {"role": role, "content": "".join(texts)}
        if calls:
            chat["tool_calls"] = calls
        out.append(chat)
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if block.get("type") == "text")


def _tool_choice(choice: dict[str, Any]) -> Any:
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice["name"]}}
    return {"any": "required", "none": "none"}.get(kind, "auto")


def _arguments(raw: str | None) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return {}  # the model wrote invalid JSON; Anthropic's input is always an object


def _stop_reason(choice: dict[str, Any]) -> str | None:
    reason = choice.get("finish_reason")
    if reason == "stop" and isinstance(choice.get("stop_reason"), str):
        return "stop_sequence"
    return _STOP_REASONS.get(reason, "end_turn") if reason else None


def _stop_sequence(choice: dict[str, Any]) -> str | None:
    stop = choice.get("stop_reason")
    return stop if isinstance(stop, str) and choice.get("finish_reason") == "stop" else None


def _message_id(response: dict[str, Any]) -> str:
    return "msg_" + str(response.get("id", "")).removeprefix("chatcmpl-")
