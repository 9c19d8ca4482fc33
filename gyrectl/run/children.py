"""Processes the head starts that must not outlive it (harnesses, gateway processes)."""

from __future__ import annotations

import shutil

DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL", "--") if shutil.which("setpriv") else ()
"""Before a command: SIGKILL once the thread that started it is gone (util-linux's ``setpriv``;
start such children from a thread that lives as long as they should)."""
