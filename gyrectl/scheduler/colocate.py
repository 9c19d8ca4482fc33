"""``colocate``: every cell rolls out until the batch is complete, then every cell trains, then the
weights go back to the servers. On-policy (staleness 0): exactly one batch is dispatched per step.

Idle cells (the run's start, a cell placed again, every cell of a resumed run) start servers while
the batch is being rolled out; once it is complete they join the training pool at once, as they
have no server to drain, so a resumed run whose batch is ready trains it without a rollout first.

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
        # A serving cell drains first; an idle one is in the pool as soon as it is moved, so the
        # step may start in the same round (a resumed run has no other event to wait for).
        moves: list[Action] = [MoveCell(cell=c.id, to=Phase.TRAIN) for c in state.cells_in(Phase.ROLLOUT, Phase.IDLE)]
        if state.phase_count(Phase.TRAIN, Phase.IDLE) == len(all_cells):
            return moves + [StartTrain(index=state.version, cells=tuple(all_cells), take=take)]
        return moves
    back = [MoveCell(cell=c.id, to=Phase.ROLLOUT) for c in state.cells_in(Phase.TRAIN)]
    slots = state.phase_count(Phase.ROLLOUT) * state.limits.slots_per_cell
    return start_idle(state, all_cells) + back + dispatch(state, slots=slots, max_staleness=0)
