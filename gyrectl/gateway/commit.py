"""Group commit: the gateway's records reach the sink from one writer thread, many per fsync.

A call's end waits for its own record to be durable (the client sees the end of a reply only
after its record is), as when each record was written and fsync'd on the event loop; but the
loop no longer stops for the disk, and the records that end while one batch is written go to
disk together with one fsync.

    call ends --submit(records)--> queue --writer thread: sink.record_many(batch)--> futures done

A call cut short (the client went away, the call failed) submits its records without waiting:
they are written all the same, in order with the rest.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Sequence

from gyrectl.capture.record import CallRecord
from gyrectl.gateway.sink import CallSink

log = logging.getLogger(__name__)
_STOP = None


class GroupCommit:
    """Started on the gateway's loop; ``await close()`` writes what is queued and stops."""

    def __init__(self, sink: CallSink, *, max_batch: int = 1024):
        self._sink, self._max_batch = sink, max_batch
        self._loop = asyncio.get_running_loop()
        self._queue: queue.SimpleQueue[tuple[Sequence[CallRecord], asyncio.Future[None]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, name="gateway-records", daemon=True)
        self._thread.start()

    async def commit(self, records: Sequence[CallRecord]) -> None:
        """Returns once ``records`` are durable; raises what the sink raised."""
        await self._submit(records)

    def commit_later(self, records: Sequence[CallRecord]) -> None:
        """Queues ``records`` without waiting (a failure is logged by the writer)."""
        self._submit(records).add_done_callback(lambda done: done.exception())

    def _submit(self, records: Sequence[CallRecord]) -> asyncio.Future[None]:
        done = self._loop.create_future()
        if records:
            self._queue.put((records, done))
        else:
            done.set_result(None)
        return done

    async def close(self) -> None:
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join)

    def _write(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self._max_batch and not self._queue.empty():
                batch.append(self._queue.get())
            stopping = _STOP in batch
            pending = [item for item in batch if item is not _STOP]
            error: BaseException | None = None
            if pending:
                try:
                    self._sink.record_many([record for records, _ in pending for record in records])
                except Exception as exc:  # each waiting call fails with it; the writer goes on
                    log.error("the gateway could not keep %d call record(s): %s", sum(len(r) for r, _ in pending), exc)
                    error = exc
            for _, done in pending:
                self._loop.call_soon_threadsafe(_settle, done, error)
            if stopping:
                return


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
