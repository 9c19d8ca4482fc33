"""The coordinator's ``Batches`` on a real run: finished training executions wait here until a
training step claims them; the claim writes ``batches/step-N.json`` (what the trainer reads) and
a ``{"execution", "step"}`` line per execution to the executions log."""

from __future__ import annotations

from collections.abc import Iterable

from gyrectl.rollout.records import ExecutionRecord
from gyrectl.run.batch_file import BatchFile, write_batch_file
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender


class BatchClaims:
    def __init__(self, *, run: RunDir, batch_executions: int, log: JsonlAppender):
        """``log``: the executions log (shared with :class:`~gyrectl.rollout.executions.LiveExecutions`)."""
        self._run, self._batch, self._log = run, batch_executions, log
        self._done: list[ExecutionRecord] = []
        self._claimed: dict[int, list[ExecutionRecord]] = {}

    def add(self, records: Iterable[ExecutionRecord]) -> None:
        """Finished training executions (each with its ``seq``), to be claimed in the order they
        finished."""
        self._done += records

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> int:
        chosen: list[ExecutionRecord] = []
        for block, version, count in take:
            matching = [d for d in self._done if _seq(d) // self._batch == block and d.weight_version == version]
            chosen += matching[:count]
        chosen.sort(key=_seq)
        claimed = {id(d) for d in chosen}
        self._done = [d for d in self._done if id(d) not in claimed]
        self._claimed = {index: chosen}  # only the step in progress can be abandoned
        write_batch_file(self._run, BatchFile(
            step=index, weights_version=index,
            entries=tuple(d.batch_entry() for d in chosen if d.trainable),
            left_out=tuple(d.execution for d in chosen if not d.trainable)))
        for done in chosen:
            self._log.append({"execution": done.execution, "step": index})
        return sum(not d.trainable for d in chosen)

    def release(self, *, index: int) -> None:
        self._done = sorted(self._done + self._claimed.pop(index, []), key=_seq)


def _seq(record: ExecutionRecord) -> int:
    assert record.seq is not None, "only training executions are claimed"
    return record.seq
