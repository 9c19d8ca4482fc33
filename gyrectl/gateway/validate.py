"""Request bodies checked before they reach a server (pure): a bad request gets a 400 naming the
field, as an OpenAI server would, instead of a confusing upstream error or a wasted retry."""

from __future__ import annotations

import json
from typing import Any

from gyrectl.gateway.errors import GatewayError, bad_request, unknown_model

# field -> (accepted types, description), per API; anything else passes through unchecked.
_COMMON = {"model": (str,), "stream": (bool,), "n": (int,), "max_tokens": (int, type(None)),
           "temperature": (int, float, type(None)), "top_p": (int, float, type(None))}
_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "chat": {**_COMMON, "messages": (list,), "tools": (list, type(None)),
             "max_completion_tokens": (int, type(None)), "logprobs": (bool, type(None)),
             "top_logprobs": (int, type(None))},
    "completions": {**_COMMON, "prompt": (str, list), "logprobs": (int, type(None))},
    "messages": {**_COMMON, "messages": (list,), "max_tokens": (int,), "tools": (list, type(None)),
                 "system": (str, list, type(None))},
    "responses": {**_COMMON, "input": (str, list), "max_output_tokens": (int, type(None))},
}
_REQUIRED = {"chat": ("model", "messages"), "completions": ("model", "prompt"),
             "messages": ("model", "messages", "max_tokens"), "responses": ("model", "input")}
_TYPE_NAMES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number",
               list: "an array", type(None): "null"}


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}") from exc
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
    if body.get("n", 1) < 1:
        raise bad_request("'n' must be at least 1.", param="n")
    if body["model"] not in served:
        raise unknown_model(body["model"], served)
    if api == "messages" and body.get("n", 1) != 1:
        raise GatewayError(400, "The Messages API returns one message; 'n' must be 1.", param="n")


def _is(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int in Python, but `"n": true` is a type error to an OpenAI server.
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)
