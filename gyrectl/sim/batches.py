"""The simulated finished executions waiting to be trained: the coordinator's ``Batches`` port.
They wait a whole GRPO group at a time, as on a real run (:mod:`gyrectl.coordinator.groups`); a
training step claims them by ``(batch, version, count)``; its batch's tokens time its work."""

from __future__ import annotations

from collections import defaultdict

from gyrectl.coordinator.groups import GroupGate, block_of_group


class SimulatedBatches:
    def __init__(self, *, batch_executions: int, group_size: int):
        self._batch, self._size = batch_executions, group_size
        self._gate: GroupGate[tuple[int, int]] = GroupGate(group_size)
        self._unclaimed: dict[tuple[int, int], list[list[int]]] = defaultdict(list)
        """Whole groups' sequence numbers by (dispatch-order block, oldest member's weights
        version), in the order their last member ended."""
        self._claimed: dict[int, list[tuple[tuple[int, int], list[list[int]]]]] = {}
        self._tokens: dict[int, int] = {}
        """Tokens each finished execution produced (a timed-out one, those it reached)."""
        self.step_tokens: dict[int, int] = {}
        """Tokens of each training step's batch, by step index."""

    def finished(self, *, seq: int, version: int, tokens: int) -> None:
        """Execution ``seq`` (dispatched with weights ``version``) ended having produced ``tokens``."""
        self._tokens[seq] = tokens
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
            tokens += sum(self._tokens[seq] for group in claimed for seq in group)
        self.step_tokens[index] = tokens
        return 0

    def release(self, *, index: int) -> None:
        """Puts step ``index``'s claimed groups back, first in line for the next claim."""
        for key, claimed in self._claimed.pop(index, []):
            self._unclaimed[key] = claimed + self._unclaimed[key]
