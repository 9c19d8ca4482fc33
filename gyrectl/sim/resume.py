"""What a simulated head takes over from the one before it, by the real head's rules
(:mod:`gyrectl.rollout.resume`): the journal is the truth, the executions log (the previous
world's :class:`~gyrectl.sim.batches.SimulatedBatches`) says what each finished execution produced
and which executions the completed steps took.

An execution the log has finished but the journal does not (the head died before it journaled the
``Finished``) runs again, as do those that were running: a new allocation keeps none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gyrectl.coordinator.events import Event, TrainEnded
from gyrectl.coordinator.journal import dispatched_and_finished
from gyrectl.sim.batches import SimulatedBatches


@dataclass(frozen=True)
class CarriedOver:
    finished: list[tuple[int, int, int]]
    """``(seq, version, tokens)`` of the finished executions no completed step took, in the order
    they ended."""
    running: list[tuple[int, int]]
    """``(seq, weights version it was dispatched at)`` of the executions to run again, by seq."""
    next_seq: int
    """The sequence number of the next execution to dispatch."""


def carry_over(events: Sequence[Event], log: SimulatedBatches) -> CarriedOver:
    version_of, finished = dispatched_and_finished(events)
    completed_steps = max((event.index + 1 for event in events if isinstance(event, TrainEnded)), default=0)
    taken = set(log.taken(before=completed_steps))
    done = [record for record in log.ended() if record[0] in finished and record[0] not in taken]
    running = [(seq, version) for seq, version in sorted(version_of.items()) if seq not in finished]
    return CarriedOver(finished=done, running=running, next_seq=len(version_of))
