"""One recorded model call, token-in/token-out. The gateway produces these; the capture store
keeps them; trajectory trees and dedup consume them.

Serialised as one JSON object per call (``to_json``); this is also the line format of
``gyrectl replay --export calls.jsonl`` and of the plain JSONL files ``gyrectl replay`` reads
(only ``execution``, ``prompt_token_ids`` and ``completion_token_ids`` are required there).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["main", "subagent", "summary"]


@dataclass(frozen=True)
class CallRecord:
    execution: str
    """Execution (one attempt of one task by the harness) the call belongs to."""
    prompt_token_ids: tuple[int, ...]
    """Tokens the server saw as the prompt (rendered by the server's chat template)."""
    completion_token_ids: tuple[int, ...]
    """Tokens the policy sampled: the only trainable tokens of this call."""
    logprobs: tuple[float, ...] | None = None
    """Behaviour log-probabilities of ``completion_token_ids`` (same length), if recorded."""
    weight_version: int | None = None
    """Policy weight version of the server that produced the completion."""
    call_id: str = ""
    """Unique id of the call (a choice of an ``n>1`` request gets ``<id>/<index>``)."""
    role: Role = "main"
    """Who made the call, where known: the main agent, a sub-agent, or a context summary."""
    server: str = ""
    """Rollout server (name or URL) that answered."""
    api: str = ""
    """Client API used: ``chat``, ``completions``, ``responses`` or ``messages``."""
    finish_reason: str = ""
    """Why generation stopped (``stop``, ``length``, ``tool_calls``, ``abort``)."""
    sample_index: int = 0
    """Index of the choice within an ``n>1`` request."""
    started_at: float = 0.0
    """Unix time the gateway received the call."""
    ended_at: float = 0.0
    """Unix time the last token was sent to the client."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """Raw tool-call payloads of the reply, as the client saw them (to recognise re-rendered
    history)."""
    segments: tuple[dict[str, Any], ...] = ()
    """Where the completion was produced, in order: ``{"server", "weight_version", "start"}``
    per piece, ``start`` being the index of its first completion token. More than one piece
    when the gateway moved the call mid-generation (a drained or dead server) and continued it
    token-in/token-out on another server."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else worth keeping (request hash, usage)."""

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["prompt_token_ids"] = list(self.prompt_token_ids)
        out["completion_token_ids"] = list(self.completion_token_ids)
        out["logprobs"] = None if self.logprobs is None else list(self.logprobs)
        out["tool_calls"] = list(self.tool_calls)
        out["segments"] = list(self.segments)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CallRecord:
        """Builds a record from a JSON object; raises ``ValueError`` naming the bad key."""
        names = {f.name for f in dataclasses.fields(cls)}
        for required in ("execution", "prompt_token_ids", "completion_token_ids"):
            if required not in obj:
                raise ValueError(f"missing key {required!r}")
        kwargs = {k: v for k, v in obj.items() if k in names}
        for key in ("prompt_token_ids", "completion_token_ids"):
            ids = kwargs[key]
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise ValueError(f"{key!r} must be a list of integers")
            kwargs[key] = tuple(ids)
        if kwargs.get("logprobs") is not None:
            if not isinstance(kwargs["logprobs"], list) or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) for x in kwargs["logprobs"]):
                raise ValueError("'logprobs' must be a list of numbers")
            kwargs["logprobs"] = tuple(float(x) for x in kwargs["logprobs"])
            if len(kwargs["logprobs"]) != len(kwargs["completion_token_ids"]):
                raise ValueError("'logprobs' must have one entry per completion token")
        version = kwargs.get("weight_version")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            raise ValueError("'weight_version' must be an integer")
        if not isinstance(kwargs["execution"], (str, int)) or isinstance(kwargs["execution"], bool):
            raise ValueError("'execution' must be a string or integer id")
        kwargs["execution"] = str(kwargs["execution"])
        kwargs["tool_calls"] = tuple(kwargs.get("tool_calls") or ())
        kwargs["segments"] = tuple(kwargs.get("segments") or ())
        if kwargs.get("role", "main") not in ("main", "subagent", "summary"):
            raise ValueError(f"'role' must be main, subagent or summary, got {kwargs['role']!r}")
        return cls(**kwargs)
