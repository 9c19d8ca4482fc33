"""A folder that appears whole or not at all: written under a temporary name, synced, renamed.

A reader (the servers, the next step, a restarted coordinator) sees either no ``final`` or a
complete one: the rename is the commit point, and the syncs before and after make it survive a
power loss, not only a crash.
"""

from __future__ import annotations

import os
from pathlib import Path


def commit_folder(tmp: Path, final: Path) -> None:
    """Syncs every file of ``tmp`` and ``tmp`` itself, renames it to ``final``, syncs the parent."""
    fsync_folder(tmp)
    os.rename(tmp, final)
    fsync_folder(final.parent, files=False)


def fsync_folder(folder: Path, *, files: bool = True) -> None:
    if files:
        for item in folder.iterdir():
            with open(item, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
