"""Steps as child processes: the part the local and Slurm backends share (on Slurm the child is
``srun``, which forwards signals to the step's tasks)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gyrectl.cluster.base import StepState, StepStatus


class ProcessSteps:
    """Starts, stops and observes one process group per step."""

    def __init__(self) -> None:
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._cancelled: set[str] = set()

    def start(self, step_id: str, argv: Sequence[str], *, env: Mapping[str, str], log_path: Path | None,
              unset: Callable[[str], bool] = lambda name: False) -> None:
        """Starts ``argv`` with this process's environment, less the variables ``unset`` names, plus ``env``."""
        assert step_id not in self._procs, f"step {step_id} already started"
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        inherited = {name: value for name, value in os.environ.items() if not unset(name)}
        try:
            self._procs[step_id] = subprocess.Popen(
                list(argv), env={**inherited, **env}, stdout=log, stderr=subprocess.STDOUT,
                # Its own process group, so stop() reaches every child; not its own session, so the
                # kernel schedules the whole run as one autogroup (a session per step made an embedded
                # run ~11 % slower on a 2-core box: docs/performance.md).
                stdin=subprocess.DEVNULL, process_group=0)
        finally:
            if log is not subprocess.DEVNULL:
                log.close()

    def stop(self, step_id: str, *, grace_s: float) -> None:
        proc = self._procs[step_id]
        if proc.poll() is not None:
            return
        self._cancelled.add(step_id)
        _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:
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
        if step_id in self._cancelled:
            return StepStatus(step_id, StepState.CANCELLED, code)
        return StepStatus(step_id, StepState.SUCCEEDED if code == 0 else StepState.FAILED, code)

    def running(self) -> list[str]:
        return [step_id for step_id, proc in self._procs.items() if proc.poll() is None]

    def stop_all(self, *, grace_s: float) -> None:
        for step_id in self.running():
            self.stop(step_id, grace_s=grace_s)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
