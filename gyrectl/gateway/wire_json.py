"""JSON on the gateway's hot path (every request body, reply and stream chunk): orjson, with the
standard library for what orjson refuses, so what is accepted and how it is refused stay the
standard library's.

orjson reads and writes several times faster (``benchmarks/gateway/gateway_only.py`` measures
both on the chunks of one call). It refuses integers beyond 64 bits, which the standard library
writes; on reading, whatever orjson refuses is read again by the standard library (which also
refuses ``NaN`` and ``Infinity`` here), so its error is the one the caller reports.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from aiohttp import web


def loads(raw: bytes | str) -> Any:
    """Raises ``ValueError`` (bad JSON, bad UTF-8, NaN/Infinity) or ``RecursionError``."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw, parse_constant=_refuse_constant)


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits
        return json.dumps(value, separators=(",", ":")).encode()


def response(value: Any, *, status: int = 200) -> web.Response:
    """``web.json_response`` with :func:`dumps`."""
    return web.Response(body=dumps(value), status=status, content_type="application/json")


def _refuse_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity, which JSON does not have and no sampler can use.
    raise ValueError(f"{name} is not a JSON number")
