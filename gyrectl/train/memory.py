"""How much memory each part of a training step adds, measured, per rank.

A span records the rank's memory when it starts and the highest it reaches before it ends; what
it *adds* (peak minus start) says what that part held at once. That is how the tests check
that no rank ever holds the full optimizer state or a full float32 copy of the model: a rank
that gathered either would add at least its size during the span that did it.

- On a GPU: the caching allocator's counters (``memory_allocated``, reset peak per span).
- On CPU: the process's resident set from ``/proc/self/status`` (``VmRSS``, ``VmHWM``), whose peak
  ``/proc/self/clear_refs`` resets per span. Memory the C allocator keeps after a ``free`` and hands
  out again does not show up as growth; run with ``MALLOC_MMAP_THRESHOLD_=65536`` (every
  allocation over 64 KiB its own mapping, unmapped on free) where the figure must be tight, as
  the tests do. Elsewhere (no ``/proc``) spans are not recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

GB = 1e9
_STATUS, _CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


@dataclass
class MemoryMeter:
    device: torch.device = field(default_factory=lambda: torch.device(
        "cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    """The GPU this process trains on (the current one: :func:`gyrectl.train.distributed.init_world`
    sets it before any span starts), else the host."""
    added: dict[str, float] = field(default_factory=dict)
    """Span -> bytes its peak rose above its start."""
    peak: float = 0.0
    """The highest memory seen in any span (bytes): on CPU the whole process's resident set."""

    @contextmanager
    def __call__(self, span: str) -> Iterator[None]:
        start = self._reset()
        try:
            yield
        finally:
            if start is not None:
                top = self._peak()
                self.added[span] = max(self.added.get(span, 0.0), top - start)
                self.peak = max(self.peak, top)

    def _reset(self) -> float | None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return float(torch.cuda.memory_allocated(self.device))
        try:
            _CLEAR_REFS.write_text("5")  # 5: reset the peak resident set to the current one
            return _status_bytes("VmRSS")
        except OSError:
            return None

    def _peak(self) -> float:
        if self.device.type == "cuda":
            return float(torch.cuda.max_memory_allocated(self.device))
        return _status_bytes("VmHWM")


def _status_bytes(key: str) -> float:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(f"{key}:"):
            return float(line.split()[1]) * 1024  # "VmRSS:  123456 kB"
    raise OSError(f"{_STATUS} has no {key}")
