"""One recorded model call, token-in/token-out. The gateway produces these; the capture store
keeps them; trajectory trees and dedup consume them.

Serialised as one JSON object per call (``to_json``); this is also the line format of
``gyrectl replay --export calls.jsonl`` and of the plain JSONL files ``gyrectl replay`` reads
(only ``execution``, ``prompt_token_ids`` and ``completion_token_ids`` are required there).
"""

from __future__ import annotations

import copy
import dataclasses
import math
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
        # Field by field: ``dataclasses.asdict`` recurses into every token id and was a third of
        # the gateway's time per call.
        out = {name: getattr(self, name) for name in _FIELD_NAMES}
        out["prompt_token_ids"] = list(self.prompt_token_ids)
        out["completion_token_ids"] = list(self.completion_token_ids)
        out["logprobs"] = None if self.logprobs is None else list(self.logprobs)
        out["tool_calls"] = copy.deepcopy(list(self.tool_calls))
        out["segments"] = [dict(segment) for segment in self.segments]
        out["extra"] = copy.deepcopy(self.extra)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CallRecord:
        """Builds a record from a JSON object; raises ``ValueError`` naming the bad key. Every value
        is checked against what the store, the trees and dedup do with it (int32 token ids, int64
        weight versions), so a bad file is refused here and not by a crash further on."""
        for required in ("execution", "prompt_token_ids", "completion_token_ids"):
            if required not in obj:
                raise ValueError(f"missing key {required!r}")
        kwargs = {k: v for k, v in obj.items() if k in _FIELDS}
        for key in ("prompt_token_ids", "completion_token_ids"):
            kwargs[key] = _token_ids(key, kwargs[key])
        if kwargs.get("logprobs") is not None:
            if not isinstance(kwargs["logprobs"], list) or not all(_is_number(x) and math.isfinite(x)
                                                                   for x in kwargs["logprobs"]):
                raise ValueError("'logprobs' must be a list of finite numbers")
            kwargs["logprobs"] = tuple(float(x) for x in kwargs["logprobs"])
            if len(kwargs["logprobs"]) != len(kwargs["completion_token_ids"]):
                raise ValueError("'logprobs' must have one entry per completion token")
        _check_version("'weight_version'", kwargs.get("weight_version"))
        if not isinstance(kwargs["execution"], (str, int)) or isinstance(kwargs["execution"], bool):
            raise ValueError("'execution' must be a string or integer id")
        kwargs["execution"] = str(kwargs["execution"])
        for key, kind in _SCALARS.items():
            if key in kwargs and not (_is_number(kwargs[key]) if kind is float else
                                      isinstance(kwargs[key], kind) and not isinstance(kwargs[key], bool)):
                raise ValueError(f"{key!r} must be {_KIND_NAMES[kind]}")
        if not isinstance(kwargs.get("extra", {}), dict):
            raise ValueError("'extra' must be an object")
        kwargs["tool_calls"] = _objects("tool_calls", kwargs.get("tool_calls") or [])
        kwargs["segments"] = _objects("segments", kwargs.get("segments") or [])
        for i, piece in enumerate(kwargs["segments"]):
            _check_version(f"'segments'[{i}].weight_version", piece.get("weight_version"))
            start = piece.get("start", 0)
            if not isinstance(start, int) or isinstance(start, bool) or start < 0:
                raise ValueError(f"'segments'[{i}].start must be a completion token index (from 0), got {start!r}")
        if kwargs.get("role", "main") not in ("main", "subagent", "summary"):
            raise ValueError(f"'role' must be main, subagent or summary, got {kwargs['role']!r}")
        return cls(**kwargs)


TOKEN_ID_MAX = 2**31 - 1
"""Token ids are stored, built into trees and packed as int32."""
_VERSION_MAX = 2**63 - 1
_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(CallRecord))
_FIELDS = set(_FIELD_NAMES)
_SCALARS: dict[str, type] = {"call_id": str, "server": str, "api": str, "finish_reason": str, "sample_index": int,
                             "started_at": float, "ended_at": float}
_KIND_NAMES = {str: "a string", int: "an integer", float: "a number"}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _token_ids(key: str, ids: Any) -> tuple[int, ...]:
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise ValueError(f"{key!r} must be a list of integers")
    for i, token in enumerate(ids):
        if not 0 <= token <= TOKEN_ID_MAX:
            raise ValueError(f"{key!r}[{i}] = {token} is not a token id (0 to {TOKEN_ID_MAX})")
    return tuple(ids)


def _check_version(key: str, version: Any) -> None:
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)
                                or not 0 <= version <= _VERSION_MAX):
        raise ValueError(f"{key} must be a weight version (an integer from 0 to 2^63-1), got {version!r}")


def _objects(key: str, items: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"{key!r} must be a list of objects")
    return tuple(items)
