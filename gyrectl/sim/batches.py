"""The simulated finished executions waiting to be trained: the coordinator's ``Batches`` port.
A training step claims them by ``(batch, version, count)``; its batch's tokens time its work."""

from __future__ import annotations

from collections import defaultdict


class SimulatedBatches:
    def __init__(self, *, batch_executions: int):
        self._batch = batch_executions
        self._unclaimed: dict[tuple[int, int], list[int]] = defaultdict(list)
        """Finished executions by (dispatch-order block, weights version), in the order they finished."""
        self._claimed: dict[int, list[tuple[tuple[int, int], list[int]]]] = {}
        self._tokens: dict[int, int] = {}
        """Tokens each finished execution produced (a timed-out one, those it reached)."""
        self.step_tokens: dict[int, int] = {}
        """Tokens of each training step's batch, by step index."""

    def finished(self, *, seq: int, version: int, tokens: int) -> None:
        """Execution ``seq`` (dispatched with weights ``version``) ended having produced ``tokens``."""
        self._tokens[seq] = tokens
        self._unclaimed[(seq // self._batch, version)].append(seq)

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> int:
        """Reserves the buffered executions of training step ``index``; a simulated execution always
        ends with a reward, so the batch leaves none out."""
        tokens, self._claimed[index] = 0, []
        for batch, version, count in take:
            pool = self._unclaimed[(batch, version)]
            assert len(pool) >= count, "the coordinator took executions the world has not finished"
            claimed, self._unclaimed[(batch, version)] = pool[:count], pool[count:]
            self._claimed[index].append(((batch, version), claimed))
            tokens += sum(self._tokens[seq] for seq in claimed)
        self.step_tokens[index] = tokens
        return 0

    def release(self, *, index: int) -> None:
        """Puts step ``index``'s claimed executions back, first in line for the next claim."""
        for key, claimed in self._claimed.pop(index, []):
            self._unclaimed[key] = claimed + self._unclaimed[key]
