"""Agent harness executions as child processes of the head: one process per execution, its
stdout kept in the run's logs, stopped at the execution time limit.

The harness is a black box. It learns where to send its calls from ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` / ``OPENAI_MODEL`` (an execution-specific gateway URL, so its calls are
attributed without changing it) and its task from ``GYRECTL_TASK``; the last line of its stdout
that is a JSON object is its *output*, which the verifier scores. A harness still running at
the time limit gets SIGTERM, then SIGKILL, and is scored on whatever output it printed. A harness
dies with the process that started it (util-linux's ``setpriv --pdeathsig KILL``, where the
machine has it), so a head or harness agent killed outright leaves no harness behind still
calling the gateway. (Not ``preexec_fn``: Python code between fork and exec can deadlock in a
process with threads, and the head runs the gateway on one.)

Each execution runs in its own working directory (``workdirs``; the launch directory is in
``GYRECTL_LAUNCH_DIR``), inside the configured sandbox (:mod:`gyrectl.rollout.sandbox`), and the
directory is removed once the execution ended unless ``keep_workdirs``.

:class:`HarnessSettings` is all of that as plain data: the head builds its runner from it, and
writes it for the harness agents of harness nodes (:mod:`gyrectl.rollout.harness_nodes`), which
build theirs from the same.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gyrectl.rollout.sandbox import Sandbox
from gyrectl.rollout.tasks import Assignment
from gyrectl.run.children import DIE_WITH_PARENT
from gyrectl.run.rundir import RunDir


@dataclass(frozen=True)
class HarnessExit:
    assignment: Assignment
    timed_out: bool
    exit_code: int | None
    output: dict[str, Any] | None
    """The last JSON object the harness printed on stdout (None if it printed none)."""
    started_at: float
    ended_at: float
    host: str = ""
    """The machine the harness ran on (its hostname)."""
    lost_on: str = ""
    """The harness node that was lost while the execution ran there (it did not end: it runs
    again); empty for an execution that ended."""


class Harnesses(Protocol):
    """Where executions run: :class:`HarnessRunner` on this machine, or
    :class:`~gyrectl.rollout.harness_nodes.RemoteHarnesses` on harness nodes."""

    @property
    def num_running(self) -> int: ...

    def start(self, assignment: Assignment, *, base_url: str) -> None: ...

    def reap(self) -> list[HarnessExit]:
        """Executions that ended (or were lost) since the last call."""
        ...

    def stop_all(self) -> None: ...


@dataclass(frozen=True)
class HarnessSettings:
    """How every harness of a run is started, wherever it runs."""

    command: tuple[str, ...]
    launch_dir: Path
    """Where ``gyrectl launch`` ran: the harness's files, ``GYRECTL_LAUNCH_DIR``."""
    env: dict[str, str]
    """Added to the environment (``OPENAI_API_KEY``, ``OPENAI_MODEL``)."""
    time_limit_s: float
    sandbox: Sandbox
    keep_workdirs: bool

    def runner(self, run: RunDir) -> HarnessRunner:
        return HarnessRunner(command=self.command, cwd=self.launch_dir, env=self.env, time_limit_s=self.time_limit_s,
                             logs_dir=execution_logs(run), workdirs=run.workdir, sandbox=self.sandbox,
                             keep_workdirs=self.keep_workdirs)

    def to_json(self) -> dict[str, Any]:
        sandbox = self.sandbox
        return {"command": list(self.command), "launch_dir": str(self.launch_dir), "env": self.env,
                "time_limit_s": self.time_limit_s, "keep_workdirs": self.keep_workdirs,
                "sandbox": {"kind": sandbox.kind, "readable": [str(p) for p in sandbox.readable],
                            "hidden": [str(p) for p in sandbox.hidden], "image": sandbox.image}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HarnessSettings:
        sandbox = data["sandbox"]
        return cls(command=tuple(data["command"]), launch_dir=Path(data["launch_dir"]), env=dict(data["env"]),
                   time_limit_s=float(data["time_limit_s"]), keep_workdirs=bool(data["keep_workdirs"]),
                   sandbox=Sandbox(sandbox["kind"], readable=tuple(Path(p) for p in sandbox["readable"]),
                                   hidden=tuple(Path(p) for p in sandbox["hidden"]), image=sandbox["image"]))


@dataclass
class _Running:
    assignment: Assignment
    process: subprocess.Popen[bytes]
    stdout_path: Path
    started_at: float
    deadline: float
    kill_at: float | None = None
    """Set once SIGTERM was sent at the time limit: SIGKILL follows at this time."""


class HarnessRunner:
    def __init__(self, *, command: Sequence[str], cwd: Path, env: Mapping[str, str], time_limit_s: float,
                 logs_dir: Path, kill_grace_s: float = 5.0, workdirs: Callable[[str], Path] | None = None,
                 sandbox: Sandbox = Sandbox("none"), keep_workdirs: bool = True):
        """``cwd``: the launch directory (every execution's working directory unless ``workdirs``
        gives each its own)."""
        self._command, self._cwd, self._env = list(command), cwd, dict(env)
        self._workdirs, self._sandbox, self._keep_workdirs = workdirs, sandbox, keep_workdirs
        self._time_limit_s, self._kill_grace_s = time_limit_s, kill_grace_s
        self._logs_dir = logs_dir
        self._logs_dir.mkdir(parents=True, exist_ok=True)
        self._running: dict[str, _Running] = {}

    @property
    def num_running(self) -> int:
        return len(self._running)

    def start(self, assignment: Assignment, *, base_url: str) -> None:
        env = {**os.environ, **self._env, "OPENAI_BASE_URL": base_url, "GYRECTL_TASK": json.dumps(assignment.task),
               "GYRECTL_EXECUTION": assignment.execution, "GYRECTL_LAUNCH_DIR": str(self._cwd)}
        workdir = self._workdir(assignment.execution)
        workdir.mkdir(parents=True, exist_ok=True)
        # started from the coordinator's or the agent's main thread, so DIE_WITH_PARENT holds
        argv = [*DIE_WITH_PARENT, *self._sandbox.wrap(self._command, workdir=workdir)]
        stdout_path = self._logs_dir / f"{assignment.execution}.out"
        with open(stdout_path, "wb") as stdout, open(self._logs_dir / f"{assignment.execution}.err", "wb") as stderr:
            process = subprocess.Popen(argv, cwd=workdir, env=env, stdout=stdout, stderr=stderr,
                                       stdin=subprocess.DEVNULL, process_group=0)  # as cluster/processes.py
        now = time.time()
        self._running[assignment.execution] = _Running(assignment, process, stdout_path, now,
                                                       deadline=now + self._time_limit_s)

    def reap(self) -> list[HarnessExit]:
        """Executions that ended since the last call; sends the time limit's signals on the way."""
        now, ended = time.time(), []
        for execution, run in list(self._running.items()):
            if not _exited(run.process):
                self._enforce_limit(run, now)
                continue
            # What the harness left behind (a tool server, a child that ignores SIGTERM) goes with
            # it: its group is signalled while its exited leader still holds the group's id.
            _signal(run.process, signal.SIGKILL)
            code = run.process.wait()
            del self._running[execution]
            ended.append(HarnessExit(run.assignment, timed_out=run.kill_at is not None, exit_code=code,
                                     output=last_json_object(run.stdout_path), started_at=run.started_at,
                                     ended_at=now, host=_HOST))
            if self._workdirs is not None and not self._keep_workdirs:
                shutil.rmtree(self._workdir(execution), ignore_errors=True)
        return ended

    def _workdir(self, execution: str) -> Path:
        return self._workdirs(execution) if self._workdirs is not None else self._cwd

    def stop_all(self) -> None:
        for run in self._running.values():
            _signal(run.process, signal.SIGKILL)
            run.process.wait()
        self._running.clear()

    def _enforce_limit(self, run: _Running, now: float) -> None:
        if run.kill_at is None and now >= run.deadline:
            _signal(run.process, signal.SIGTERM)
            run.kill_at = now + self._kill_grace_s
        elif run.kill_at is not None and now >= run.kill_at:
            _signal(run.process, signal.SIGKILL)


_HOST = socket.gethostname()
OUTPUT_TAIL_BYTES = 8 << 20
"""How much of the end of a harness's stdout is searched for its output: a harness that printed
gigabytes costs the head no more memory than this."""


def execution_logs(run: RunDir) -> Path:
    """Where each execution's stdout and stderr are kept (``EXECUTION.out``, ``EXECUTION.err``),
    written by the harness's node and read by the head."""
    return run.logs_dir / "executions"


def last_json_object(path: Path) -> dict[str, Any] | None:
    """The last line of ``path`` that is a JSON object, within its last ``OUTPUT_TAIL_BYTES``."""
    try:
        with open(path, "rb") as out:
            size = out.seek(0, os.SEEK_END)
            out.seek(max(0, size - OUTPUT_TAIL_BYTES))
            tail = out.read()
    except OSError:
        return None
    lines = tail.splitlines()
    if size > OUTPUT_TAIL_BYTES:
        lines = lines[1:]  # cut at an arbitrary byte: the first line is a piece of one
    for line in reversed(lines):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def text_excerpt(path: Path, *, head: int = 12, tail: int = 8, width: int = 300) -> str:
    """The first ``head`` and last ``tail`` lines of a log (a Python traceback ends with the error),
    indented, each cut at ``width`` characters; "" for an empty or missing file."""
    try:
        with open(path, "rb") as log:
            text = log.read(1 << 20).decode(errors="replace")
    except OSError:
        return ""
    lines = [line[:width] for line in text.splitlines() if line.strip()]
    if len(lines) > head + tail:
        lines = [*lines[:head], f"... ({len(lines) - head - tail} lines left out)", *lines[-tail:]]
    return "\n".join("  " + line for line in lines)


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the harness's leader exited, without reaping it (its pid, the group's id, stays
    taken until ``wait``)."""
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)  # the harness's own children (tools, sub-processes) too
    except ProcessLookupError:
        pass
