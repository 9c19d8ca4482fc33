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


def records(ctx: CallContext, captures: dict[int, ChoiceCapture], *,
            extra: dict[str, Any] | None = None) -> list[CallRecord]:
    """One record per choice; a choice the client stopped reading ends ``client_closed``."""
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
            finish_reason=cap.finish_reason or "client_closed", sample_index=index,
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
