"""``/v1/responses``, relayed to vLLM's own Responses API with token capture switched on.

vLLM returns the rendered prompt and output token ids with ``enable_response_messages`` (in
``response.completed`` when streaming) and per-token logprobs with
``include: ["message.output_text.logprobs"]``; the gateway asks for both and hides them again.

Unlike chat and completions, a Responses stream is a sequence of typed events over output
items that the gateway cannot synthesise from raw tokens, so a call is re-sent whole only
while the client has seen nothing; once events flowed it keeps its server through a drain
(see ``lifecycle``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gyrectl.capture.record import CallRecord
from gyrectl.gateway.capture import CallContext, ChoiceCapture, records
from gyrectl.gateway.pool import Lease

PATH = "/v1/responses"
ABORT_PREFIX = "resp_"
_LOGPROBS = "message.output_text.logprobs"


@dataclass(frozen=True)
class Asked:
    messages: bool
    logprobs: bool


def upstream_request(body: dict[str, Any]) -> tuple[dict[str, Any], Asked]:
    include = list(body.get("include") or ())
    asked = Asked(messages=bool(body.get("enable_response_messages")), logprobs=_LOGPROBS in include)
    if not asked.logprobs:
        include.append(_LOGPROBS)
    return {**body, "enable_response_messages": True, "include": include}, asked


def record_of(ctx: CallContext, response: dict[str, Any], lease: Lease) -> CallRecord:
    capture = ChoiceCapture(0, prompt_ids=_tokens(response.get("input_messages")))
    capture.on_server(lease)
    capture.token_ids = _tokens(response.get("output_messages"))
    capture.logprobs = [entry["logprob"] for item in response.get("output") or ()
                        for part in item.get("content") or () for entry in part.get("logprobs") or ()]
    capture.tool_calls = [item for item in response.get("output") or () if item.get("type") == "function_call"]
    capture.finish(_finish_reason(response, capture))
    return records(ctx, {0: capture})[0]


def reply_problem(response: Any) -> str | None:
    """What makes a Responses reply unreadable to :func:`record_of`, or ``None``."""
    if not isinstance(response, dict):
        return "the response is not an object"
    for key in ("input_messages", "output_messages", "output"):
        if not _objects(response.get(key) or []):
            return f"{key!r} is not a list of objects"
    for message in (response.get("input_messages") or []) + (response.get("output_messages") or []):
        tokens = message.get("tokens") or []
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            return "a message's 'tokens' are not token ids"
    for item in response.get("output") or ():
        if not _objects(item.get("content") or []):
            return "an output item's 'content' is not a list of objects"
        for part in item.get("content") or ():
            entries = part.get("logprobs") or []
            if not _objects(entries) or not all(isinstance(e.get("logprob"), int | float) for e in entries):
                return "an output part's 'logprobs' are not numbers"
    return None


def _objects(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(item, dict) for item in items)


def strip_response(response: dict[str, Any], asked: Asked) -> dict[str, Any]:
    out = dict(response)
    if not asked.messages:
        out.pop("input_messages", None)
        out.pop("output_messages", None)
    if not asked.logprobs and out.get("output"):
        out["output"] = [_strip_item(item) for item in out["output"]]
    return out


def strip_event(event: dict[str, Any], asked: Asked) -> dict[str, Any]:
    out = dict(event)
    if isinstance(out.get("response"), dict):
        out["response"] = strip_response(out["response"], asked)
    if not asked.logprobs:
        if "logprobs" in out:
            out["logprobs"] = []
        if isinstance(out.get("part"), dict):
            out["part"] = _strip_part(out["part"])
        if isinstance(out.get("item"), dict):
            out["item"] = _strip_item(out["item"])
    return out


def _strip_item(item: dict[str, Any]) -> dict[str, Any]:
    if not item.get("content"):
        return item
    return {**item, "content": [_strip_part(p) for p in item["content"]]}


def _strip_part(part: dict[str, Any]) -> dict[str, Any]:
    return {**part, "logprobs": []} if "logprobs" in part else part


def _finish_reason(response: dict[str, Any], capture: ChoiceCapture) -> str:
    if response.get("status") == "incomplete":
        return "length"
    return "tool_calls" if capture.tool_calls else "stop"


def _tokens(messages: list[dict[str, Any]] | None) -> list[int]:
    return [t for message in messages or () for t in message.get("tokens") or ()]
