"""Waiting for a started rollout server to serve.

A vLLM server answers ``GET /health`` with 200 only once its engine has loaded the weights
(20-40 s for the tiny model on CPU, minutes for a large one). Before that the port refuses
connections or the route answers 503. A server that crashes while loading never answers, so the
wait also asks whether its step is still alive and fails at once when it is not, instead of
sitting out the whole deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gyrectl.cluster.base import Cluster
from gyrectl.errors import RuntimeFailure
from gyrectl.rollout.http import ServerCallError, get


def wait_healthy(url: str, *, alive: Callable[[], bool], timeout_s: float, poll_s: float = 0.5,
                 request_timeout_s: float = 2.0) -> float:
    """Blocks until ``url/health`` answers 200; returns the seconds it waited.

    Raises ``RuntimeFailure`` as soon as ``alive()`` is false, or after ``timeout_s``.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        if not alive():
            raise RuntimeFailure(f"the rollout server at {url} ended before it answered /health "
                                 f"(after {time.monotonic() - started:.1f} s); see its step log")
        try:
            get(f"{url}/health", timeout_s=request_timeout_s)
            return time.monotonic() - started
        except ServerCallError:  # not listening yet, or still loading (503)
            pass
        if time.monotonic() + poll_s > deadline:
            raise RuntimeFailure(f"the rollout server at {url} did not answer /health within {timeout_s:.0f} s")
        time.sleep(poll_s)


def step_alive(cluster: Cluster, step_id: str) -> Callable[[], bool]:
    """``alive`` for :func:`wait_healthy`: the step has not ended (pending or running)."""
    return lambda: not cluster.step_status(step_id).state.ended
