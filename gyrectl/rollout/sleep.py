"""A rollout server's engine put to sleep while its cell trains, and woken when the cell returns
(both off the coordinator's thread: :class:`EngineSwitches`):
vLLM's sleep mode (``--enable-sleep-mode``; control routes need ``VLLM_SERVER_DEV_MODE=1``).

    POST /sleep?level=1     weights to host memory, KV cache freed (GPU memory for the trainer)
    POST /sleep?level=2     weights and KV cache dropped; the newest weights are reloaded on wake
    POST /wake_up           back on the GPU; the caller then syncs the newest weights (the
                            ``reload_weights`` path, which also resets the prefix cache)

vLLM on CPU answers both and keeps everything where it was (its worker logs that CPU has no sleep
mode), so the same calls run in CI. Seconds on a GPU instead of an engine start (vLLM's figures:
2.9 s wake vs 47 s cold for a 30B model).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gyrectl.errors import RuntimeFailure
from gyrectl.rollout.http import post

log = logging.getLogger(__name__)

SLEEP_TIMEOUT_S = 300.0
"""The longest a sleep or wake call is waited for where the run's ``rollout.wake_timeout_s`` is
not given (offloading a large model's weights to host memory takes a while; a hung server must
not take forever)."""


def sleep_server(url: str, *, level: int, key: str, timeout_s: float = SLEEP_TIMEOUT_S) -> None:
    post(f"{url}/sleep?level={level}", timeout_s=timeout_s, key=key)


def wake_server(url: str, *, key: str, timeout_s: float = SLEEP_TIMEOUT_S) -> None:
    post(f"{url}/wake_up", timeout_s=timeout_s, key=key)


@dataclass
class _Call:
    """A sleep or wake of one cell's replicas: ``done`` once it ended, ``ok`` if every replica answered."""

    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False


class EngineSwitches:
    """Each cell's server replicas put to sleep and woken off the coordinator's thread (a thread
    per call): what is under way, and how it went. A call not answered within ``timeout_s``
    (``rollout.wake_timeout_s``) failed; the coordinator then stops that server."""

    def __init__(self, *, key: str, timeout_s: float = SLEEP_TIMEOUT_S):
        self._key, self._timeout_s = key, timeout_s
        self._lock = threading.Lock()
        self._sleeps: dict[int, _Call] = {}
        """Each draining cell whose server was asked to sleep (since the cell began draining)."""
        self._wakes: dict[int, _Call] = {}
        """Each cell whose wake is under way."""

    def sleep(self, cell: int, urls: Sequence[str], *, level: int) -> None:
        """Starts putting the cell's replicas to sleep, unless that was asked since the drain began."""
        with self._lock:
            if cell in self._sleeps:
                return
            self._sleeps[cell] = call = _Call()
        def put_to_sleep() -> None:
            for url in urls:
                sleep_server(url, level=level, key=self._key, timeout_s=self._timeout_s)
        self._start(call, f"sleep-cell{cell}", put_to_sleep, ended=lambda: None)

    def asleep(self, cell: int) -> bool | None:
        """None while the sleep is under way (or not asked), else whether every replica sleeps."""
        with self._lock:
            call = self._sleeps.get(cell)
        return call.ok if call is not None and call.done.is_set() else None

    def forget_sleep(self, cell: int) -> None:
        """The cell begins to drain: an earlier sleep says nothing about this one."""
        with self._lock:
            self._sleeps.pop(cell, None)

    def wake(self, cell: int, urls: Sequence[str]) -> None:
        """Starts waking the cell's replicas."""
        call = _Call()
        with self._lock:
            self._wakes[cell] = call

        def ended() -> None:
            with self._lock:
                if self._wakes.get(cell) is call:
                    del self._wakes[cell]
        def wake_up() -> None:
            for url in urls:
                wake_server(url, key=self._key, timeout_s=self._timeout_s)
        self._start(call, f"wake-cell{cell}", wake_up, ended=ended)

    def waking(self, cell: int) -> bool:
        with self._lock:
            return cell in self._wakes

    def woke(self, cell: int) -> bool:
        """Waits for the cell's wake under way, if any; False if it failed (the coordinator
        replaces that server, so what was to follow the wake is moot)."""
        with self._lock:
            call = self._wakes.get(cell)
        return call is None or (call.done.wait() and call.ok)

    @staticmethod
    def _start(call: _Call, name: str, calls: Callable[[], None], *, ended: Callable[[], None]) -> None:
        def run() -> None:
            try:
                calls()
                call.ok = True
            except RuntimeFailure as exc:
                log.warning("%s: a server did not answer: %s", name, exc)
            finally:
                ended()
                call.done.set()
        threading.Thread(target=run, name=name, daemon=True).start()
