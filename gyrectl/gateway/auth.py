"""Who is calling: the client or the admin token, and the execution a call belongs to (pure).

Two tokens, so that agent code under training never holds the keys to the run: harnesses get the
client token, which reaches the client routes only; the admin routes take the admin token alone.

A harness is configured with a base URL and an API key, nothing else, so either can carry the
execution:

* base URL ``http://HOST:PORT/x/<execution>/v1`` with API key ``<token>``, or
* base URL ``http://HOST:PORT/v1`` with API key ``<token>.<execution>``.

An optional role (``main``, ``subagent``, ``summary``) may follow the execution in the URL
(``/x/<execution>/<role>/v1``) for harnesses that give sub-agents their own base URL. OpenAI
clients send the key as ``Authorization: Bearer``, Anthropic clients as ``x-api-key``.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

ROLES = ("main", "subagent", "summary")
UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class Caller:
    execution: str
    role: str
    api_path: str
    """The path from ``/v1`` on, e.g. ``/v1/chat/completions``."""


def presented_key(headers: Mapping[str, str]) -> str:
    auth = headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("x-api-key", "").strip()


def identify(path: str, key: str, token: str) -> Caller | None:
    """The caller of ``path`` with API key ``key``, or ``None`` when the key is not the client token."""
    secret, _, key_execution = key.partition(".")
    if not _same(secret, token):
        return None
    execution, role, api_path = key_execution or UNATTRIBUTED, "main", path
    if path.startswith("/x/"):
        parts = path[3:].split("/")
        execution, rest = parts[0], parts[1:]
        if rest and rest[0] in ROLES:
            role, rest = rest[0], rest[1:]
        api_path = "/" + "/".join(rest)
    return Caller(execution, role, api_path)


def is_admin(key: str, admin_token: str) -> bool:
    """Whether ``key`` is the admin token (never true while the admin routes are off)."""
    return bool(admin_token) and _same(key, admin_token)


def _same(presented: str, secret: str) -> bool:
    # Constant time (keys that are not UTF-8 text were refused before: app._check_key_headers).
    return hmac.compare_digest(presented.encode(), secret.encode())
