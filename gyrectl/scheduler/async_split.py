"""``async``: a fixed split. The last ``scheduler.async_train_cells`` cells only train, the others
only roll out, continuously, with dispatch bounded by ``scheduler.max_staleness``. Nothing moves.

Idle training cells (the run's start, a cell placed again, every cell of a resumed run) have no
server to start or drain: they join the training pool at once, and a ready batch starts training
on them in the same round.

Whether it is a fair baseline depends on the split, so the benchmark searches the split that suits
each workload best rather than reporting only an even one."""

from __future__ import annotations

from gyrectl.coordinator.actions import Action, MoveCell, StartTrain
from gyrectl.coordinator.state import CoordinatorState, Phase
from gyrectl.scheduler.common import dispatch, next_batch, start_idle, sync_weights


def decide(state: CoordinatorState, now: float) -> list[Action]:
    limits = state.limits
    first_train = limits.num_cells - limits.async_train_cells
    train_cells = tuple(range(first_train, limits.num_cells))
    actions: list[Action] = start_idle(state, range(first_train))
    actions += [MoveCell(cell=cell.id, to=Phase.TRAIN) for cell in state.cells.by_phase[Phase.IDLE]
                if cell.id >= first_train]
    take = next_batch(state)
    if (state.train is None and take is not None  # the idle ones are in the pool once moved above
            and all(state.cells[c].phase in (Phase.TRAIN, Phase.IDLE) for c in train_cells)):
        actions.append(StartTrain(index=state.version, cells=train_cells, take=take))
    slots = state.phase_count(Phase.ROLLOUT) * limits.slots_per_cell
    return actions + sync_weights(state) + dispatch(state, slots=slots, max_staleness=limits.max_staleness)
