"""A cell's server wakes off the coordinator's thread (issue 26): ``wake`` returns at once, the cell
is not ready until every replica woke, a reload asked meanwhile waits for the wake, and a server
that does not wake within the timeout stays unready (the coordinator replaces it) while its
reload is dropped. The server is a small HTTP stub that freezes for as long as told when woken
(its ``/health`` hangs too, as a stopped process's would), and takes as long to fall asleep.
The sleep, too, runs off the coordinator's thread."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gyrectl.coordinator.events import WeightsSynced
from gyrectl.rollout.cell_servers import LiveCellServers
from gyrectl.rollout.outbox import Outbox
from gyrectl.rollout.replicas import CellServer
from gyrectl.run.rundir import RunDir


class StubEngine(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, wake_s: float):
        self.wake_s, self.calls, self.frozen_until = wake_s, [], 0.0
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: StubEngine

    def do_GET(self) -> None:  # /health
        time.sleep(max(0.0, self.server.frozen_until - time.monotonic()))
        self._answer()

    def do_POST(self) -> None:
        self.server.calls.append((self.path, time.monotonic()))
        if self.path == "/wake_up":
            self.server.frozen_until = time.monotonic() + self.server.wake_s
        if self.path == "/wake_up" or self.path.startswith("/sleep"):
            time.sleep(self.server.wake_s)
        self._answer()

    def _answer(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


class RecordingSync:
    def __init__(self) -> None:
        self.synced: list[tuple[int, float]] = []

    def sync(self, url: str, weights_dir: Path, version: int) -> None:
        self.synced.append((version, time.monotonic()))


class NoGateway:
    def servers(self):
        return []


@pytest.fixture
def engine(request):
    stub = StubEngine(wake_s=request.param)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    yield stub
    stub.shutdown()


def cell_servers(tmp_path: Path, engine: StubEngine, sync: RecordingSync, *, timeout_s: float,
                 outbox: Outbox | None = None) -> LiveCellServers:
    return LiveCellServers(run=RunDir(tmp_path), gateway=NoGateway(), servers=[[CellServer("cell0", engine.url, "n0")]],
                           replicas_of=lambda cell, nodes: (), weight_sync=sync, outbox=outbox or Outbox(),
                           wake_timeout_s=timeout_s)


def _until(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("engine", [1.0], indirect=True)
def test_a_wake_returns_at_once_and_the_cell_is_ready_once_it_woke_then_reloads(tmp_path, engine) -> None:
    sync, outbox = RecordingSync(), Outbox()
    servers = cell_servers(tmp_path, engine, sync, timeout_s=10.0, outbox=outbox)
    started = time.monotonic()
    servers.wake(0)
    servers.sync_weights(0, 4)
    assert time.monotonic() - started < 0.5, "the coordinator's thread must not wait for the wake"
    assert not servers.ready(0) and servers.reloading() == {4}
    assert _until(lambda: servers.ready(0))
    assert _until(lambda: sync.synced)
    [(wake_path, _)] = engine.calls
    assert wake_path == "/wake_up" and sync.synced[0][1] >= started + engine.wake_s  # reloaded after the wake
    assert _until(lambda: [e.version for e in outbox.pending() if isinstance(e, WeightsSynced)] == [4])


@pytest.mark.parametrize("engine", [3.0], indirect=True)
def test_a_server_that_does_not_wake_in_time_stays_unready_and_its_reload_is_dropped(tmp_path, engine) -> None:
    sync = RecordingSync()
    servers = cell_servers(tmp_path, engine, sync, timeout_s=0.3)
    servers.wake(0)
    servers.sync_weights(0, 4)
    assert _until(lambda: servers.reloading() == set(), timeout_s=5.0)
    assert not servers.ready(0) and sync.synced == []  # frozen: its health check fails as well
    assert _until(lambda: servers.ready(0)), "a server that answers again is not held back by a failed wake"


@pytest.mark.parametrize("engine", [1.0], indirect=True)
def test_a_sleep_returns_at_once_asked_again_does_nothing_and_says_when_it_slept(tmp_path, engine) -> None:
    servers = cell_servers(tmp_path, engine, RecordingSync(), timeout_s=10.0)
    engine.calls.clear()
    started = time.monotonic()
    servers.sleep(0, level=1)
    servers.sleep(0, level=1)  # the coordinator asks each round until it sleeps
    assert time.monotonic() - started < 0.5 and servers.asleep(0) is None
    assert _until(lambda: servers.asleep(0) is True)
    assert [path for path, _ in engine.calls] == ["/sleep?level=1"]
    servers.route(0, routed=False)  # the cell's next drain: the last sleep says nothing of it
    assert servers.asleep(0) is None


@pytest.mark.parametrize("engine", [3.0], indirect=True)
def test_a_server_that_does_not_go_to_sleep_in_time_says_so(tmp_path, engine) -> None:
    servers = cell_servers(tmp_path, engine, RecordingSync(), timeout_s=0.3)
    servers.sleep(0, level=1)
    assert _until(lambda: servers.asleep(0) is not None, timeout_s=5.0)
    assert servers.asleep(0) is False  # the coordinator stops it
