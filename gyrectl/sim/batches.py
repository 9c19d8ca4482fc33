"""The simulated finished executions waiting to be trained: the coordinator's ``Batches`` port.
They wait a whole GRPO group at a time, as on a real run (:mod:`gyrectl.coordinator.groups`); a
training step claims them by ``(batch, version, count)``; its batch's tokens time its work.

What it records of each finished execution and claim is the run's executions log, which outlives
a head: a world that takes the run over reads it back (:mod:`gyrectl.sim.resume`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from gyrectl.coordinator.groups import GroupGate, block_of_group


class SimulatedBatches:
    def __init__(self, *, batch_executions: int, group_size: int):
        self._batch, self._size = batch_executions, group_size
        self._gate: GroupGate[tuple[int, int]] = GroupGate(group_size)
        self._unclaimed: dict[tuple[int, int], list[list[int]]] = defaultdict(list)
        """Whole groups' sequence numbers by (dispatch-order block, oldest member's weights
        version), in the order their last member ended."""
        self._claimed: dict[int, list[tuple[tuple[int, int], list[list[int]]]]] = {}
        self._ended: dict[int, tuple[int, int]] = {}
        """``(version, tokens)`` of each finished execution, in the order they ended (a timed-out
        one's tokens are those it reached)."""
        self.step_tokens: dict[int, int] = {}
        """Tokens of each training step's batch, by step index."""

    def finished(self, *, seq: int, version: int, tokens: int) -> None:
        """Execution ``seq`` (dispatched with weights ``version``) ended having produced ``tokens``."""
        self._ended[seq] = (version, tokens)
        if (ended := self._gate.ended(seq, (seq, version))) is not None:
            group, members = ended
            block = block_of_group(group, group_size=self._size, batch_executions=self._batch)
            self._unclaimed[(block, min(v for _, v in members))].append([s for s, _ in members])

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> int:
        """Reserves the buffered executions of training step ``index``; a simulated execution always
        ends with a reward, so the batch leaves none out."""
        tokens, self._claimed[index] = 0, []
        for batch, version, count in take:
            pool, groups = self._unclaimed[(batch, version)], count // self._size
            assert count % self._size == 0 and len(pool) >= groups, "took groups the world has not ended"
            claimed, self._unclaimed[(batch, version)] = pool[:groups], pool[groups:]
            self._claimed[index].append(((batch, version), claimed))
            tokens += sum(self._ended[seq][1] for group in claimed for seq in group)
        self.step_tokens[index] = tokens
        return 0

    def release(self, *, index: int) -> None:
        """Puts step ``index``'s claimed groups back, first in line for the next claim."""
        for key, claimed in self._claimed.pop(index, []):
            self._unclaimed[key] = claimed + self._unclaimed[key]

    def taken(self, *, before: int) -> list[int]:
        """Sequence numbers of the executions the steps before step ``before`` claimed, by step."""
        return [seq for index in sorted(self._claimed) if index < before
                for _, groups in self._claimed[index] for group in groups for seq in group]

    def ended(self) -> list[tuple[int, int, int]]:
        """``(seq, version, tokens)`` of every finished execution, in the order they ended."""
        return [(seq, version, tokens) for seq, (version, tokens) in self._ended.items()]

    def take_over(self, ended: Iterable[tuple[int, int, int]]) -> None:
        """Another world's finished executions ``(seq, version, tokens)`` wait here for training
        (in the order they ended there): whole groups, and members of groups still open."""
        for seq, version, tokens in ended:
            self.finished(seq=seq, version=version, tokens=tokens)
