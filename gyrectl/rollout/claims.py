"""The coordinator's ``Batches`` on a real run: finished training executions wait here, a whole
GRPO group at a time (:mod:`gyrectl.coordinator.groups`), until a training step claims them; the
claim writes ``batches/step-N.json`` (what the trainer reads) and a ``{"execution", "step"}`` line
per execution to the executions log."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gyrectl.coordinator.groups import GroupGate, block_of_group, has_signal
from gyrectl.rollout.records import ExecutionRecord
from gyrectl.run.batch_file import BatchFile, write_batch_file
from gyrectl.run.rundir import RunDir
from gyrectl.store.jsonl import JsonlAppender


@dataclass(frozen=True)
class EndedGroup:
    group: int
    block: int
    """Its dispatch-order block (``seq // batch_executions``)."""
    version: int
    """The weights its oldest member was dispatched with."""
    members: tuple[ExecutionRecord, ...]

    @property
    def with_signal(self) -> bool:
        return has_signal([m.reward for m in self.members if m.trainable and m.reward is not None])


class BatchClaims:
    def __init__(self, *, run: RunDir, batch_executions: int, group_size: int, log: JsonlAppender):
        """``log``: the executions log (shared with :class:`~gyrectl.rollout.executions.LiveExecutions`)."""
        self._run, self._batch, self._size, self._log = run, batch_executions, group_size, log
        self._gate: GroupGate[ExecutionRecord] = GroupGate(group_size)
        self._ended: list[EndedGroup] = []
        """Whole groups, in the order their last member ended."""
        self._claimed: dict[int, list[EndedGroup]] = {}

    def add(self, records: Iterable[ExecutionRecord]) -> None:
        """Finished training executions (each with its ``seq``)."""
        for record in records:
            if (ended := self._gate.ended(_seq(record), record)) is not None:
                group, members = ended
                self._ended.append(EndedGroup(
                    group=group, block=block_of_group(group, group_size=self._size, batch_executions=self._batch),
                    version=min(_version(m) for m in members), members=tuple(sorted(members, key=_seq))))

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> int:
        chosen: list[EndedGroup] = []
        for block, version, count in take:
            assert count % self._size == 0, "the coordinator takes whole groups"
            # Groups with a signal first: with training.skip_uniform_groups the coordinator counts
            # only those (until the draws run out), and the groups it kept out stay here unclaimed.
            matching = sorted((g for g in self._ended if (g.block, g.version) == (block, version)),
                              key=lambda g: not g.with_signal)
            chosen += matching[:count // self._size]
        assert sum(len(g.members) for g in chosen) == sum(count for _, _, count in take), "took unended groups"
        chosen.sort(key=lambda g: g.group)
        claimed = {g.group for g in chosen}
        self._ended = [g for g in self._ended if g.group not in claimed]
        self._claimed = {index: chosen}  # only the step in progress can be abandoned
        members = [m for g in chosen for m in g.members]
        write_batch_file(self._run, BatchFile(
            step=index, weights_version=index,
            entries=tuple(m.batch_entry(group=_seq(m) // self._size) for m in members if m.trainable),
            left_out=tuple(m.execution for m in members if not m.trainable)))
        for member in members:
            self._log.append({"execution": member.execution, "step": index})
        return sum(not m.trainable for m in members)

    def release(self, *, index: int) -> None:
        self._ended = sorted(self._ended + self._claimed.pop(index, []), key=lambda g: g.group)


def _seq(record: ExecutionRecord) -> int:
    assert record.seq is not None, "only training executions are claimed"
    return record.seq


def _version(record: ExecutionRecord) -> int:
    assert record.weight_version is not None, "a training execution knows its weights"
    return record.weight_version
