"""``colocate``: every cell rolls out until the batch is complete, then every cell trains, then the
weights go back to the servers. On-policy (staleness 0): exactly one batch is dispatched per step.

This is the baseline the reference reports against: while the batch's slowest executions finish,
the rest of the cluster waits."""

from __future__ import annotations

from gyrectl.coordinator.actions import Action, MoveCell, StartTrain
from gyrectl.coordinator.state import CoordinatorState, Phase
from gyrectl.scheduler.common import dispatch, next_batch, start_idle


def decide(state: CoordinatorState, now: float) -> list[Action]:
    if state.train is not None:
        return []
    all_cells = range(state.limits.num_cells)
    take = next_batch(state)
    if take is not None:  # the batch is complete (nothing in flight): everyone trains
        if state.phase_count(Phase.TRAIN) == len(all_cells):
            return [StartTrain(index=state.version, cells=tuple(all_cells), take=take)]
        return [MoveCell(cell=c.id, to=Phase.TRAIN) for c in state.cells_in(Phase.ROLLOUT)]
    back = [MoveCell(cell=c.id, to=Phase.ROLLOUT) for c in state.cells_in(Phase.TRAIN)]
    slots = state.phase_count(Phase.ROLLOUT) * state.limits.slots_per_cell
    return start_idle(state, all_cells) + back + dispatch(state, slots=slots, max_staleness=0)
