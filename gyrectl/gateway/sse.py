"""Server-sent events: an incremental parser for upstream streams and the encoder for ours.

Only what OpenAI, Anthropic and vLLM streams use: ``event:`` and ``data:`` lines, events split
by a blank line. Comments (``:``) and ``id:``/``retry:`` lines are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gyrectl.gateway import wire_json

DONE = "[DONE]"


@dataclass(frozen=True)
class SseEvent:
    data: str
    event: str | None = None


class SseParser:
    """Feed it bytes as they arrive; it returns the events completed so far."""

    def __init__(self) -> None:
        self._buffer = b""
        self._held_cr = b""

    def feed(self, data: bytes) -> list[SseEvent]:
        # Normalise CRLF to LF; a read ending in "\r" keeps it until the next read shows
        # whether a "\n" follows.
        data = self._held_cr + data
        self._held_cr = b"\r" if data.endswith(b"\r") else b""
        self._buffer += data[:len(data) - len(self._held_cr)].replace(b"\r\n", b"\n")
        events = []
        while (end := self._buffer.find(b"\n\n")) >= 0:
            block, self._buffer = self._buffer[:end], self._buffer[end + 2:]
            event = _parse_block(block.decode("utf-8"))
            if event is not None:
                events.append(event)
        return events


def _parse_block(block: str) -> SseEvent | None:
    name, data = None, []
    for line in block.split("\n"):
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return SseEvent("\n".join(data), name) if data else None


def encode(data: Any, event: str | None = None) -> bytes:
    """One SSE event; ``data`` is JSON-encoded unless it is already a string (``[DONE]``)."""
    text = data.encode() if isinstance(data, str) else wire_json.dumps(data)
    head = f"event: {event}\n".encode() if event else b""
    return b"%bdata: %b\n\n" % (head, text)
