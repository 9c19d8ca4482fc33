"""The step keeper leaves no process of a step behind, however the step ends: its command killed,
a stop, a stop with no grace, the head that started it killed (issue 26). The step's command is a
shell whose child escapes into a session of its own (as torchrun's workers do) and outlives it
(as vLLM's engine core outlived an API server killed with SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gyrectl.cluster.base import StepState
from gyrectl.cluster.keeper import descendants, keeper_argv, process_stat
from gyrectl.cluster.processes import ProcessSteps, stop_owned

ESCAPING = "setsid sleep 300 & echo $! > {pid_file}; sleep 300"
"""A step whose child leaves its process group (and would outlive it)."""


def _alive(pid: int) -> bool:
    stat = process_stat(pid)
    return stat is not None and stat[0] != "Z"


def _wait_for(path: Path) -> int:
    deadline = time.monotonic() + 10
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.02)
    return int(path.read_text())


def _escaping_step(tmp_path: Path, name: str = "step", *, ignore_term: bool = False) -> tuple[list[str], Path]:
    pid_file = tmp_path / f"{name}.pid"
    script = ("trap '' TERM; " if ignore_term else "") + ESCAPING.format(pid_file=pid_file)
    return ["bash", "-c", script], pid_file


def test_a_killed_command_takes_what_it_started_with_it_and_the_keeper_ends_as_it_did(tmp_path):
    argv, pid_file = _escaping_step(tmp_path)
    keeper = subprocess.Popen(keeper_argv(argv))
    escaped = _wait_for(pid_file)
    command = next(pid for pid in descendants(keeper.pid) if pid != escaped)
    os.kill(command, signal.SIGKILL)
    assert keeper.wait(timeout=10) == -signal.SIGKILL
    assert not _alive(escaped)


def test_the_exit_code_of_the_command_is_the_keepers():
    assert subprocess.run(keeper_argv(["bash", "-c", "exit 3"]), timeout=10).returncode == 3


@pytest.mark.parametrize("grace_s", [5.0, 0.0])
def test_a_stop_leaves_nothing_even_of_a_command_that_ignores_sigterm(tmp_path, grace_s):
    steps = ProcessSteps()
    argv, pid_file = _escaping_step(tmp_path, ignore_term=grace_s == 0)
    steps.start("s", argv, env={}, log_path=None)
    escaped = _wait_for(pid_file)
    started = time.monotonic()
    steps.stop("s", grace_s=grace_s)
    assert time.monotonic() - started < 3
    assert steps.status("s").state is StepState.CANCELLED
    assert not _alive(escaped)


def test_the_steps_of_a_killed_head_stop_themselves(tmp_path):
    """The head (here a small Python parent) dies with SIGKILL: its keepers notice their parent
    is gone and stop their steps, so no server or trainer of a dead head holds a port."""
    argv, pid_file = _escaping_step(tmp_path)
    head = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, time
        subprocess.Popen({keeper_argv(argv)!r})
        time.sleep(300)""")])
    escaped = _wait_for(pid_file)
    keeper = next(pid for pid in descendants(head.pid) if b"gyrectl.cluster.keeper" in Path(f"/proc/{pid}/cmdline")
                  .read_bytes())
    head.kill()
    head.wait()
    deadline = time.monotonic() + 15
    while (_alive(escaped) or _alive(keeper)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(escaped) and not _alive(keeper)


def test_a_later_head_stops_what_an_earlier_one_of_the_same_run_left(tmp_path):
    """Keepers are labelled with their run: a resumed head stops the old head's steps and waits
    until they are gone; other runs' steps stay."""
    mine, pid_file = _escaping_step(tmp_path, "mine")
    theirs, their_pid_file = _escaping_step(tmp_path, "theirs")
    old = subprocess.Popen(keeper_argv(mine, owner=str(tmp_path / "run")), start_new_session=True)
    other = subprocess.Popen(keeper_argv(theirs, owner=str(tmp_path / "other")), start_new_session=True)
    try:
        escaped, their_child = _wait_for(pid_file), _wait_for(their_pid_file)
        found = _run_elsewhere(f"from gyrectl.cluster.processes import stop_owned; "
                               f"print(stop_owned({str(tmp_path / 'run')!r}))")
        assert found == f"[{old.pid}]"
        assert old.wait(timeout=10) is not None and not _alive(escaped)
        assert other.poll() is None and _alive(their_child)
        assert stop_owned(str(tmp_path / "run")) == []  # nothing left to find
    finally:
        for keeper in (other, old):
            if keeper.poll() is None:
                keeper.send_signal(signal.SIGUSR1)  # what stop() sends: everything below goes
                keeper.wait(timeout=10)


def _run_elsewhere(code: str) -> str:
    """Runs ``code`` in a process that did not start the keepers (a new head)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def test_a_head_that_ends_stops_every_step_and_what_each_started(tmp_path):
    """``gyrectl stop`` (or any end of the head) closes the cluster: every step goes, with the
    children that escaped its process group."""
    from gyrectl.cluster.base import StepSpec
    from gyrectl.cluster.local.cluster import LocalCluster
    from gyrectl.config.loader import parse_config

    cluster = LocalCluster(parse_config({"cluster": {"nodes": 2}}), owner=str(tmp_path))
    cluster.discover()
    escaped = []
    for cell in (0, 1):
        argv, pid_file = _escaping_step(tmp_path, f"cell{cell}", ignore_term=cell == 1)
        cluster.start_step(StepSpec(name=f"rollout-cell{cell}", nodes=(f"local-{cell}",), command=tuple(argv)))
        escaped.append(_wait_for(pid_file))
    cluster.close()
    assert not [pid for pid in escaped if _alive(pid)]
