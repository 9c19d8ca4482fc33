"""What the gateway learns about each choice of a call while it runs, and the records it makes.

One :class:`ChoiceCapture` per choice index collects the prompt ids, each sampled token id and
its logprob, the finish reason and tool calls, from the upstream replies (whole or streamed,
possibly from several servers in turn); :func:`records` turns them into ``CallRecord``\\ s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gyrectl.capture.record import CallRecord, Role
from gyrectl.gateway.pool import Lease

# vLLM ends a choice with "abort" when the request was cancelled (our own drain, or a
# coordinator's /pause?mode=abort): the gateway continues such a choice elsewhere, so "abort"
# never counts as an end.
ABORTED = "abort"
# A record's finish_reason when its choice never finished (values are a file-format contract:
# add, never rename): the client stopped reading, or the call failed at the servers and the
# client got an error.
CLIENT_CLOSED = "client_closed"
UPSTREAM_ERROR = "upstream_error"
_MAX_TOOL_CALLS = 1024


@dataclass(frozen=True)
class CallContext:
    execution: str
    call_id: str
    api: str
    role: Role = "main"
    started_at: float = field(default_factory=time.time)


@dataclass
class ChoiceCapture:
    index: int
    prompt_ids: list[int] | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def on_server(self, lease: Lease) -> None:
        """Notes that the tokens from here on come from ``lease``'s server."""
        start = len(self.token_ids)
        if self.segments and self.segments[-1]["start"] == start:
            self.segments.pop()  # that server produced nothing for this choice
        self.segments.append({"server": lease.server, "weight_version": lease.weight_version,
                              "start": start})

    def add_tokens(self, ids: list[int] | None, logprobs: list[float] | None) -> None:
        self.token_ids.extend(ids or ())
        self.logprobs.extend(logprobs or ())

    def finish(self, reason: str | None) -> None:
        if reason and reason != ABORTED:
            self.finish_reason = reason


def capture_for(captures: dict[int, ChoiceCapture], index: int, lease: Lease) -> ChoiceCapture:
    if index not in captures:
        captures[index] = ChoiceCapture(index)
        captures[index].on_server(lease)
    return captures[index]


def records(ctx: CallContext, captures: dict[int, ChoiceCapture], *, unfinished: str = CLIENT_CLOSED,
            extra: dict[str, Any] | None = None) -> list[CallRecord]:
    """One record per choice; a choice that never finished ends ``unfinished``."""
    ended = time.time()
    out = []
    for index in sorted(captures):
        cap = captures[index]
        logprobs = tuple(cap.logprobs) if len(cap.logprobs) == len(cap.token_ids) else None
        segments = tuple(cap.segments)
        out.append(CallRecord(
            execution=ctx.execution, prompt_token_ids=tuple(cap.prompt_ids or ()),
            completion_token_ids=tuple(cap.token_ids), logprobs=logprobs,
            weight_version=segments[0]["weight_version"] if segments else None,
            call_id=ctx.call_id if len(captures) == 1 else f"{ctx.call_id}/{index}",
            role=ctx.role, server=segments[-1]["server"] if segments else "", api=ctx.api,
            finish_reason=cap.finish_reason or unfinished, sample_index=index,
            started_at=ctx.started_at, ended_at=ended, tool_calls=tuple(cap.tool_calls),
            segments=segments, extra=dict(extra or {}),
        ))
    return out


def merge_tool_call_deltas(calls: list[dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    """Folds streamed ``delta.tool_calls`` fragments into whole tool calls (chat format)."""
    for delta in deltas:
        position = delta.get("index", len(calls))
        while len(calls) <= position:
            calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call = calls[position]
        call["id"] = delta.get("id") or call["id"]
        function = delta.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""


def usage_block(prompt_tokens: int, captures: dict[int, ChoiceCapture]) -> dict[str, int]:
    """OpenAI ``usage`` of a reassembled reply: completion tokens counted over every choice."""
    completion = sum(len(c.token_ids) for c in captures.values())
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion}


def reply_problem(reply: dict[str, Any], *, whole: bool) -> str | None:
    """What makes a chat or completions reply (``whole``) or stream chunk unreadable to the
    absorbing code, or ``None``: a server answering this is broken, not the client."""
    choices = reply.get("choices", [])
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        return "'choices' is not a list of objects"
    if whole and not choices:
        return "a reply without choices"
    if not _ids_or_none(reply.get("prompt_token_ids")):
        return "'prompt_token_ids' is not a list of token ids"
    for choice in choices:
        index = choice.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            return f"a choice's 'index' is {index!r}"
        if not (_ids_or_none(choice.get("token_ids")) and _ids_or_none(choice.get("prompt_token_ids"))):
            return "a choice's token ids are not a list of token ids"
        if not isinstance(choice.get("finish_reason"), str | None):
            return "a choice's 'finish_reason' is not a string"
        if not all(isinstance(choice.get(key), dict | None) for key in ("logprobs", "message", "delta")):
            return "a choice's 'logprobs', 'message' or 'delta' is not an object"
        if not _logprobs_readable(choice.get("logprobs") or {}):
            return "a choice's logprobs are not numbers"
        said = choice.get("message") or choice.get("delta") or {}
        calls = said.get("tool_calls") or []
        if not isinstance(calls, list) or not all(isinstance(c, dict) and _function_readable(c) for c in calls):
            return "a choice's 'tool_calls' are not tool calls"
    return None


def _ids_or_none(ids: Any) -> bool:
    # ``map(type, ...)`` runs in C: this is on every reply and chunk (bool is not a token id).
    return ids is None or isinstance(ids, list) and (not ids or set(map(type, ids)) == {int})


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _logprobs_readable(logprobs: dict[str, Any]) -> bool:
    """Chat's ``content`` entries, or completions' parallel lists (read by continuations)."""
    content, token_logprobs = logprobs.get("content") or [], logprobs.get("token_logprobs") or []
    tokens, tops = logprobs.get("tokens") or [], logprobs.get("top_logprobs") or []
    return (isinstance(content, list) and all(isinstance(e, dict) and _number(e.get("logprob")) for e in content)
            and isinstance(token_logprobs, list) and all(_number(x) or x is None for x in token_logprobs)
            and isinstance(tokens, list) and all(isinstance(t, str) for t in tokens)
            and isinstance(tops, list) and all(top is None or isinstance(top, dict) and all(
                isinstance(t, str) and _number(lp) for t, lp in top.items()) for top in tops))


def _function_readable(call: dict[str, Any]) -> bool:
    function, index = call.get("function") or {}, call.get("index", 0)
    # A streamed tool call's index places it in a list: a huge one would allocate that list.
    return (isinstance(function, dict) and all(isinstance(function.get(k), str | None) for k in ("name", "arguments"))
            and isinstance(index, int) and 0 <= index < _MAX_TOOL_CALLS)
