"""Steps as child processes: the part the local and Slurm backends share (on Slurm the child is
``srun``, which forwards signals to the step's tasks). Each runs under a step keeper
(:mod:`gyrectl.cluster.keeper`), which stops every process the step started, whatever already
exited, and stops the step if the head that started it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gyrectl.cluster.base import StepState, StepStatus
from gyrectl.cluster.keeper import keeper_argv, process_stat

KEEPER_EXIT_S = 10.0
"""How long a keeper told to kill its step may take to exit before its group is killed."""


class ProcessSteps:
    """Starts, stops and observes one keeper (and process group) per step."""

    def __init__(self, *, owner: str = "") -> None:
        """``owner``: the label of this head's keepers (the run directory), by which a later head
        of the run finds what this one left (:func:`stop_owned`)."""
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._cancelled: set[str] = set()
        self._ended_at: dict[str, float] = {}
        """When each step was first seen ended."""
        self._owner = owner

    def start(self, step_id: str, argv: Sequence[str], *, env: Mapping[str, str], log_path: Path | None,
              unset: Callable[[str], bool] = lambda name: False) -> None:
        """Starts ``argv`` with this process's environment, less the variables ``unset`` names, plus ``env``."""
        assert step_id not in self._procs, f"step {step_id} already started"
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        inherited = {name: value for name, value in os.environ.items() if not unset(name)}
        try:
            self._procs[step_id] = subprocess.Popen(
                keeper_argv(argv, owner=self._owner), env={**inherited, **env}, stdout=log, stderr=subprocess.STDOUT,
                # Its own process group, so stop() reaches every child; not its own session, so the
                # kernel schedules the whole run as one autogroup (a session per step made an embedded
                # run ~11 % slower on a 2-core box: docs/performance.md).
                stdin=subprocess.DEVNULL, process_group=0)
        finally:
            if log is not subprocess.DEVNULL:
                log.close()

    def stop(self, step_id: str, *, grace_s: float) -> None:
        """SIGTERM to the step's command (through its keeper); after ``grace_s`` (at once if 0)
        the keeper kills whatever of the step is left."""
        proc = self._procs[step_id]
        if proc.poll() is not None:
            return
        self._cancelled.add(step_id)
        if grace_s > 0:
            _kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
                return
            except subprocess.TimeoutExpired:
                pass
        _kill(proc.pid, signal.SIGUSR1)
        try:
            proc.wait(timeout=KEEPER_EXIT_S)
        except subprocess.TimeoutExpired:  # the keeper itself hangs: its group at least goes
            _signal_group(proc, signal.SIGKILL)
            proc.wait()

    def await_cancel(self, step_id: str, timeout_s: float) -> bool:
        """Counts the step as cancelled (something else is stopping it) and waits up to
        ``timeout_s`` for it to exit; True if it did."""
        proc = self._procs[step_id]
        self._cancelled.add(step_id)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def status(self, step_id: str) -> StepStatus:
        proc = self._procs[step_id]
        code = proc.poll()
        if code is None:
            return StepStatus(step_id, StepState.RUNNING)
        ended_at = self._ended_at.setdefault(step_id, time.time())
        if step_id in self._cancelled:
            return StepStatus(step_id, StepState.CANCELLED, code, ended_at)
        return StepStatus(step_id, StepState.SUCCEEDED if code == 0 else StepState.FAILED, code, ended_at)

    def running(self) -> list[str]:
        return [step_id for step_id, proc in self._procs.items() if proc.poll() is None]

    def stop_all(self, *, grace_s: float) -> None:
        for step_id in self.running():
            self.stop(step_id, grace_s=grace_s)


def stop_owned(owner: str, *, timeout_s: float = 30.0) -> list[int]:
    """Stops the steps of keepers labelled ``owner`` that this process did not start (those of a
    head that died: they stop themselves once they notice, this makes sure and waits until they
    are gone, ports and memory freed); returns the keepers' pids."""
    mine, label = os.getpid(), b"\0--owner\0" + os.fsencode(owner) + b"\0"
    found = []
    for entry in os.scandir("/proc"):
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read()
        except OSError:
            continue
        stat = process_stat(entry.name) if entry.name.isdigit() else None
        if b"gyrectl.cluster.keeper" in argv and label in argv and stat is not None and stat[1] != mine:
            found.append(int(entry.name))
    for pid in found:
        _kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout_s
    while (alive := [pid for pid in found if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        _kill(pid, signal.SIGKILL)
    return found


def _alive(pid: int) -> bool:
    stat = process_stat(pid)
    return stat is not None and stat[0] != "Z"


def _kill(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
