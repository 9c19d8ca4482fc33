"""Request bodies checked before they reach a server (pure): a bad request gets a 400 naming the
field, as an OpenAI server would, instead of a confusing upstream error, a wasted retry or a
crash in the gateway's own reading of the body. Admin bodies too: a bad server entry would
break every later call."""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import urlsplit

from gyrectl.gateway import wire_json
from gyrectl.gateway.errors import bad_request, unknown_model

_NULL = type(None)
# field -> accepted types, per API; anything else passes through unchecked.
_COMMON: dict[str, tuple[type, ...]] = {
    "model": (str,), "stream": (bool,), "n": (int,), "max_tokens": (int, _NULL),
    "temperature": (int, float, _NULL), "top_p": (int, float, _NULL), "stream_options": (dict, _NULL),
    "min_tokens": (int, _NULL)}
_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "chat": {**_COMMON, "messages": (list,), "tools": (list, _NULL),
             "max_completion_tokens": (int, _NULL), "logprobs": (bool, _NULL),
             "top_logprobs": (int, _NULL)},
    "completions": {**_COMMON, "prompt": (str, list), "logprobs": (int, _NULL)},
    "messages": {**_COMMON, "messages": (list,), "max_tokens": (int,), "tools": (list, _NULL),
                 "system": (str, list, _NULL), "tool_choice": (dict, _NULL),
                 "stop_sequences": (list, _NULL)},
    "responses": {**_COMMON, "input": (str, list), "max_output_tokens": (int, _NULL),
                  "include": (list, _NULL)},
}
_REQUIRED = {"chat": ("model", "messages"), "completions": ("model", "prompt"),
             "messages": ("model", "messages", "max_tokens"), "responses": ("model", "input")}
_TYPE_NAMES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number",
               list: "an array", dict: "an object", _NULL: "null"}
MAX_N = 128
"""Choices one call may ask for: each is a sequence on the server, so ``n`` is a load knob."""
MAX_TOKENS = 2**31 - 1
"""Above any context length; vLLM's own limit, checked here so a huge number is a 400."""
_TOKEN_BUDGETS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_VERSION_MAX = 2**63 - 1  # weight versions are stored as int64 (``CallRecord``)
_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # one URL path segment, no escaping


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = wire_json.loads(raw)
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, bad UTF-8, NaN
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise bad_request(f"The request body is not valid JSON: {reason}") from exc
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    return body


def check_request(api: str, body: dict[str, Any], served: tuple[str, ...]) -> None:
    for name in _REQUIRED[api]:
        if name not in body:
            raise bad_request(f"Missing required parameter: {name!r}.", param=name)
    for name, types in _FIELDS[api].items():
        if name in body and not _is(body[name], types):
            wanted = " or ".join(_TYPE_NAMES[t] for t in types)
            raise bad_request(f"Invalid type for {name!r}: expected {wanted}.", param=name)
    _check_ranges(body)
    if body["model"] not in served:
        raise unknown_model(body["model"], served)
    if api == "messages":
        _check_messages_api(body)
    if api == "responses" and not all(isinstance(x, str) for x in body.get("include") or ()):
        raise bad_request("'include' must be an array of strings.", param="include")


def _check_ranges(body: dict[str, Any]) -> None:
    if not 1 <= body.get("n", 1) <= MAX_N:
        raise bad_request(f"'n' must be from 1 to {MAX_N}.", param="n")
    for name in _TOKEN_BUDGETS:
        if body.get(name) is not None and not 1 <= body[name] <= MAX_TOKENS:
            raise bad_request(f"{name!r} must be from 1 to {MAX_TOKENS}.", param=name)
    if body.get("min_tokens") is not None and not 0 <= body["min_tokens"] <= MAX_TOKENS:
        raise bad_request(f"'min_tokens' must be from 0 to {MAX_TOKENS}.", param="min_tokens")
    temperature, top_p = body.get("temperature"), body.get("top_p")
    if temperature is not None and not (_finite(temperature) and temperature >= 0):
        raise bad_request("'temperature' must be a finite number, at least 0.", param="temperature")
    if top_p is not None and not (_finite(top_p) and 0 < top_p <= 1):
        raise bad_request("'top_p' must be a number above 0, at most 1.", param="top_p")
    include_usage = (body.get("stream_options") or {}).get("include_usage")
    if not isinstance(include_usage, bool | None):
        raise bad_request("'stream_options.include_usage' must be a boolean.", param="stream_options")


def _check_messages_api(body: dict[str, Any]) -> None:
    """What the conversion to chat reads (``anthropic.to_chat_request``), shaped as Anthropic
    documents it."""
    if body.get("n", 1) != 1:
        raise bad_request("The Messages API returns one message; 'n' must be 1.", param="n")
    if isinstance(body.get("system"), list) and not all(_text_block(b) for b in body["system"]):
        raise bad_request("'system' must be a string or an array of text blocks.", param="system")
    for i, message in enumerate(body["messages"]):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and (isinstance(message.get("content"), str) or _blocks(message.get("content")))):
            raise bad_request(f"'messages[{i}]' must be an object with a 'role' string and a 'content' "
                              "string or array of content blocks.", param=f"messages[{i}]")
    for i, tool in enumerate(body.get("tools") or ()):
        if not (isinstance(tool, dict) and isinstance(tool.get("name"), str)
                and isinstance(tool.get("description", ""), str)
                and isinstance(tool.get("input_schema", {}), dict)):
            raise bad_request(f"'tools[{i}]' must be an object with a 'name' string (and an 'input_schema' "
                              "object).", param=f"tools[{i}]")
    choice = body.get("tool_choice") or {}
    if not isinstance(choice.get("type", ""), str) or (choice.get("type") == "tool"
                                                       and not isinstance(choice.get("name"), str)):
        raise bad_request("'tool_choice' must have a 'type' string ('tool' with a 'name').", param="tool_choice")
    if not all(isinstance(s, str) for s in body.get("stop_sequences") or ()):
        raise bad_request("'stop_sequences' must be an array of strings.", param="stop_sequences")


def _blocks(content: Any) -> bool:
    return isinstance(content, list) and all(_block(b) for b in content)


def _block(block: Any) -> bool:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return False
    kind = block["type"]
    if kind == "text":
        return _text_block(block)
    if kind == "tool_use":
        return (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                and isinstance(block.get("input", {}), dict))
    if kind == "tool_result":
        content = block.get("content", "")
        return isinstance(block.get("tool_use_id"), str) and (
            isinstance(content, str) or isinstance(content, list) and all(_text_block(b) for b in content))
    return True  # other block kinds (images, documents) are passed over by the conversion


def _text_block(block: Any) -> bool:
    return isinstance(block, dict) and (block.get("type") != "text" or isinstance(block.get("text"), str))


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _is(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int in Python, but `"n": true` is a type error to an OpenAI server.
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


# -- admin bodies ------------------------------------------------------------------------------
def server_entry(body: dict[str, Any]) -> tuple[str, str, int | None]:
    """``(name, url, weight_version)`` of ``POST /admin/servers``."""
    name, url = body.get("name"), body.get("url")
    if not isinstance(name, str) or not _SERVER_NAME.fullmatch(name):
        raise bad_request("'name' must be a string of letters, digits, '.', '_' or '-' (at most 128, "
                          f"not starting with a sign), got {name!r}.", param="name")
    if not isinstance(url, str) or not _http_url(url):
        raise bad_request(f"'url' must be an http(s) URL such as http://host:8100, got {url!r}.", param="url")
    version = body.get("weight_version")
    return name, url, None if version is None else _version(version, "weight_version")


def drain_grace(body: dict[str, Any]) -> float | None:
    grace = body.get("grace_s")
    if grace is not None and not (_is(grace, (int, float)) and _finite(grace) and grace >= 0):
        raise bad_request(f"'grace_s' must be a finite number of seconds, at least 0, got {grace!r}.",
                          param="grace_s")
    return grace


def weight_version(body: dict[str, Any]) -> int:
    return _version(body.get("version"), "version")


def execution_settings(body: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
    """``(min_version, sampling)`` of ``POST /admin/executions/ID``; either may be absent."""
    version, sampling = body.get("min_version"), body.get("sampling")
    if sampling is not None and not (isinstance(sampling, dict) and all(
            isinstance(value, str | bool) or _is(value, (int, float)) and _finite(value)
            for value in sampling.values())):
        raise bad_request(f"'sampling' must be an object of request fields with number, string or boolean "
                          f"values, got {sampling!r}.", param="sampling")
    return None if version is None else _version(version, "min_version"), sampling


def _version(version: Any, key: str) -> int:
    if not _is(version, (int,)) or not 0 <= version <= _VERSION_MAX:
        raise bad_request(f"{key!r} must be an integer from 0 to 2^63-1, got {version!r}.", param=key)
    return version


def _http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a port that is no number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and url.isprintable()
