"""The step keeper: runs one step's command and, however the step ends, leaves none of its processes.

    python -m gyrectl.cluster.keeper [--owner TAG] -- ARGV...

Stopping a step's process group is not enough. vLLM's engine core outlives an API server killed
with SIGKILL; torchrun starts each worker in a session of its own, so a signal to the agent's
group never reaches them, and a torchrun agent that dies leaves its workers to init. The keeper is
a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every process the step starts stays below it,
even after its parent died, so it can always find them (``/proc``) and stop them:

- ARGV exits (finished, crashed, killed): every process left below the keeper gets SIGTERM, then
  SIGKILL after ``LEFTOVER_GRACE_S``; the keeper exits as ARGV did (the same code or signal, so
  whoever watches the step sees the step's own end).
- SIGTERM (a stop): passed to ARGV, which shuts down in its own way; the processes left when it
  exited, or all of them after ``--grace`` seconds, are killed.
- SIGUSR1 (a stop with nothing worth waiting for): everything below is killed at once.
- Its parent is gone (the head was killed): as SIGTERM. A new head starts the run's steps over
  (``Resumed``), so nothing of the old one must hold a port, a GPU or a batch.

``--owner`` only labels the keeper's command line, so a later head of the same run can find the
steps an earlier one left (:func:`gyrectl.cluster.processes.stop_owned`).

Standard library only: it starts before every step, so it must start fast.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE_S = 2.0
"""How long processes left after the step's command exited get to end on SIGTERM."""
POLL_S = 0.5
"""How often the keeper looks for its parent while nothing else happens."""
_WATCHED = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}


def keeper_argv(argv: Sequence[str], *, owner: str = "") -> list[str]:
    """``argv`` run under a keeper (with this interpreter, so in this environment)."""
    return [sys.executable, "-m", "gyrectl.cluster.keeper", *(("--owner", owner) if owner else ()), "--", *argv]


def process_stat(pid: int | str) -> tuple[str, int] | None:
    """``(state, parent pid)`` of a process from ``/proc/PID/stat``; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
    except (OSError, ValueError):
        return None
    return state.decode(), int(ppid)


def descendants(root: int) -> list[int]:
    """Every process below ``root``, parents before children (read from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (stat := process_stat(entry.name)) is not None:
            children.setdefault(stat[1], []).append(int(entry.name))
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


def signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def reap() -> dict[int, int]:
    """Collects every child that ended (reparented orphans too): ``{pid: wait status}``."""
    ended = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = status


def clear_below(grace_s: float) -> None:
    """SIGTERM to everything below the keeper, SIGKILL to what is left after ``grace_s``."""
    me = os.getpid()
    signal_all(descendants(me), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (left := descendants(me)) and time.monotonic() < deadline:
        reap()
        time.sleep(0.05)
    give_up = time.monotonic() + LEFTOVER_GRACE_S
    while left and time.monotonic() < give_up:  # a zombie goes once its parent is killed and reaped here
        signal_all(left, signal.SIGKILL)
        reap()
        time.sleep(0.02)
        left = descendants(me)
    reap()


def keep(argv: Sequence[str], *, grace_s: float) -> int:
    """Runs ``argv`` under the keeper's watch; returns its wait status."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    parent = os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)  # taken with sigtimedwait: no handler races
    child = subprocess.Popen(list(argv), preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, set()))
    stop_by: float | None = None
    while True:
        ended = reap()
        if child.pid in ended:
            break
        if stop_by is not None and time.monotonic() > stop_by:
            signal_all(descendants(os.getpid()), signal.SIGKILL)
        got = signal.sigtimedwait(_WATCHED, POLL_S)
        number = got.si_signo if got else None
        if number == signal.SIGUSR1:
            signal_all(descendants(os.getpid()), signal.SIGKILL)
        elif stop_by is None and (number in (signal.SIGTERM, signal.SIGINT) or os.getppid() != parent):
            os.kill(child.pid, signal.SIGTERM if number is None else number)
            stop_by = time.monotonic() + grace_s
    clear_below(LEFTOVER_GRACE_S)
    return ended[child.pid]


def exit_as(status: int) -> None:
    """Ends this process the way the status says the step ended: its exit code, or its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        sys.exit(128 + sig)  # a signal whose default is not to terminate
    sys.exit(os.waitstatus_to_exitcode(status))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gyrectl.cluster.keeper", description=__doc__.split("\n\n")[0])
    parser.add_argument("--grace", type=float, default=30.0, help="seconds a stopped step gets before SIGKILL")
    parser.add_argument("--owner", default="", help="a label for a later head to find this step by")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the step's argv")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    exit_as(keep(command, grace_s=args.grace))


if __name__ == "__main__":
    main()
