"""Group commit: a call's commit returns only once its records are kept, records that end while
one batch is written share the next write, and a failing write fails the calls of its batch only."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from gyrectl.capture.record import CallRecord
from gyrectl.gateway.commit import GroupCommit


def call(i: int) -> CallRecord:
    return CallRecord(execution=f"e{i}", prompt_token_ids=(1,), completion_token_ids=(i,))


class SlowSink:
    """Takes 20 ms a batch (an fsync), from one thread at a time; fails the batches holding ``poison``."""

    def __init__(self, poison: set[str] = frozenset()):
        self.batches: list[list[str]] = []
        self.poison = poison
        self._busy = threading.Lock()

    def record_many(self, calls):
        assert self._busy.acquire(blocking=False), "two writers at once"
        try:
            time.sleep(0.02)
            names = [c.execution for c in calls]
            if self.poison & set(names):
                raise OSError("disk full")
            self.batches.append(names)
        finally:
            self._busy.release()

    def kept(self) -> list[str]:
        return [name for batch in self.batches for name in batch]


def test_each_commit_returns_after_its_records_are_kept_and_batches_share_a_write():
    sink = SlowSink()

    async def main():
        commits = GroupCommit(sink)

        async def one(i):
            await commits.commit([call(i)])
            assert f"e{i}" in sink.kept()  # durable before the call may end
        await asyncio.gather(*(one(i) for i in range(200)))
        await commits.close()
    asyncio.run(main())
    assert sorted(sink.kept()) == sorted(f"e{i}" for i in range(200))
    assert len(sink.batches) < 50, "records ending together must share a write"


def test_a_failing_batch_fails_its_calls_only_and_the_writer_goes_on():
    sink = SlowSink(poison={"e1"})

    async def main():
        commits = GroupCommit(sink)
        with pytest.raises(OSError, match="disk full"):
            await commits.commit([call(1)])
        await commits.commit([call(2)])
        commits.commit_later([call(3)])
        commits.commit_later([call(1)])  # fails unseen (nobody waits): the writer logs it
        await commits.close()  # what was queued is written (or failed) before it returns
    asyncio.run(main())
    assert sink.kept()[0] == "e2" and "e1" not in sink.kept()
