"""Finding the processes of a run, to show that none is left after it ended: every step carries
``GYRECTL_RUN_DIR`` in its environment (vLLM's engine core and torchrun's workers inherit it), and
the head, the keepers and the trainers name the run directory on their command lines."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gyrectl.cluster.keeper import process_stat


def read_proc(path: str) -> bytes:
    """A ``/proc`` file's bytes (empty once its process is gone or hidden)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def run_processes(run_dir: Path) -> dict[int, str]:
    """Every live process whose command line or environment names the run directory."""
    marks = {os.fsencode(str(run_dir)), os.fsencode(str(run_dir.resolve()))}
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        stat = process_stat(entry.name)
        cmdline, environ = read_proc(f"/proc/{entry.name}/cmdline"), read_proc(f"/proc/{entry.name}/environ")
        if stat and stat[0] != "Z" and any(mark in cmdline or mark in environ for mark in marks):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")[:160]
    return found


def assert_nothing_left(run_dir: Path, within_s: float = 40.0) -> None:
    deadline = time.monotonic() + within_s
    while (left := run_processes(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes of the run left behind: {left}"
