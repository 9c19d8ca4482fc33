"""The coordinator's ``Clock`` on a real run: wall-clock time, and a poll interval to wait."""

from __future__ import annotations

import time


class WallClock:
    def __init__(self, poll_s: float = 0.25):
        self._poll_s = poll_s

    def now(self) -> float:
        return time.time()

    def wait(self) -> None:
        time.sleep(self._poll_s)
