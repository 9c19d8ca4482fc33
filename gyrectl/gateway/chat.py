"""``/v1/chat/completions``: what the gateway adds upstream, reads back, and hides again.

Upstream it asks for ``return_token_ids`` (prompt and completion ids) and ``logprobs`` (the
behaviour policy's logprob of each sampled token); the client gets its reply without whatever it
did not ask for itself, so it sees an ordinary OpenAI response.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from gyrectl.gateway.capture import ABORTED, ChoiceCapture, capture_for, merge_tool_call_deltas, usage_block
from gyrectl.gateway.continuation import completion_logprobs
from gyrectl.gateway.pool import Lease

PATH = "/v1/chat/completions"
ABORT_PREFIX = "chatcmpl-"


@dataclass(frozen=True)
class Asked:
    """What the client asked for itself, so the gateway hides only what it added."""
    token_ids: bool
    logprobs: bool
    top_logprobs: int
    include_usage: bool


def upstream_request(body: dict[str, Any]) -> tuple[dict[str, Any], Asked]:
    asked = Asked(token_ids=bool(body.get("return_token_ids")), logprobs=bool(body.get("logprobs")),
                  top_logprobs=int(body.get("top_logprobs") or 0),
                  include_usage=bool((body.get("stream_options") or {}).get("include_usage")))
    return {**body, "return_token_ids": True, "logprobs": True}, asked


def absorb_response(response: dict[str, Any], captures: dict[int, ChoiceCapture], lease: Lease) -> None:
    for choice in response.get("choices", ()):
        cap = capture_for(captures, choice["index"], lease)
        cap.prompt_ids = response.get("prompt_token_ids")
        cap.add_tokens(choice.get("token_ids"), _logprobs(choice))
        cap.tool_calls = copy.deepcopy((choice.get("message") or {}).get("tool_calls") or [])
        cap.finish(choice.get("finish_reason"))


def absorb_chunk(chunk: dict[str, Any], captures: dict[int, ChoiceCapture], lease: Lease) -> None:
    for choice in chunk.get("choices", ()):
        cap = capture_for(captures, choice["index"], lease)
        if chunk.get("prompt_token_ids") is not None:
            cap.prompt_ids = chunk["prompt_token_ids"]
        cap.add_tokens(choice.get("token_ids"), _logprobs(choice))
        merge_tool_call_deltas(cap.tool_calls, (choice.get("delta") or {}).get("tool_calls") or [])
        cap.finish(choice.get("finish_reason"))


def strip_response(response: dict[str, Any], asked: Asked) -> dict[str, Any]:
    out = dict(response)
    if not asked.token_ids:
        out.pop("prompt_token_ids", None)
        out.pop("prompt_text", None)
    out["choices"] = [_strip_choice(c, asked) for c in response.get("choices", ())]
    return out


def strip_chunk(chunk: dict[str, Any], asked: Asked) -> dict[str, Any] | None:
    """The chunk as the client should see it, or ``None`` when nothing of it is for the client
    (a choice vLLM ended with ``abort`` is continued elsewhere, so its end is hidden too)."""
    out = dict(chunk)
    if not asked.token_ids:
        out.pop("prompt_token_ids", None)
        out.pop("prompt_text", None)
    choices = []
    for choice in chunk.get("choices", ()):
        if choice.get("finish_reason") == ABORTED:
            choice = {**choice, "finish_reason": None, "stop_reason": None}
        choice = _strip_choice(choice, asked)
        if choice.get("delta") or choice.get("finish_reason") or choice.get("logprobs"):
            choices.append(choice)
    if not choices and chunk.get("choices"):
        return None
    out["choices"] = choices
    return out


def continuation_chunk(header: dict[str, Any], index: int, choice: dict[str, Any],
                       asked: Asked) -> dict[str, Any]:
    """A ``/v1/completions`` continuation piece, dressed as the chat chunk the client expects."""
    delta = {"content": choice["text"]} if choice.get("text") else {}
    out = {"index": index, "delta": delta, "logprobs": None,
           "finish_reason": choice.get("finish_reason"), "stop_reason": choice.get("stop_reason")}
    if asked.logprobs:
        out["logprobs"] = {"content": _chat_logprobs(choice, asked.top_logprobs)}
    if asked.token_ids:
        out["token_ids"] = choice.get("token_ids")
    return {**header, "object": "chat.completion.chunk", "choices": [out]}


def usage_chunk(header: dict[str, Any], captures: dict[int, ChoiceCapture]) -> dict[str, Any]:
    prompt = len(next(iter(captures.values())).prompt_ids or ()) if captures else 0
    return {**header, "object": "chat.completion.chunk", "choices": [], "usage": usage_block(prompt, captures)}


def _strip_choice(choice: dict[str, Any], asked: Asked) -> dict[str, Any]:
    out = dict(choice)
    if not asked.token_ids:
        out.pop("token_ids", None)
    if not asked.logprobs:
        out["logprobs"] = None
    return out


def _logprobs(choice: dict[str, Any]) -> list[float]:
    return [entry["logprob"] for entry in ((choice.get("logprobs") or {}).get("content") or ())]


def _chat_logprobs(choice: dict[str, Any], top_k: int) -> list[dict[str, Any]]:
    logprobs = choice.get("logprobs") or {}
    entries = []
    tokens = logprobs.get("tokens") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    for token, logprob, top in zip(tokens, completion_logprobs(choice), tops, strict=False):
        ranked = sorted((top or {}).items(), key=lambda kv: -kv[1])[:top_k]
        entries.append({"token": token, "logprob": logprob, "bytes": list(token.encode()),
                        "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())}
                                         for t, lp in ranked]})
    return entries
