"""``async``: a fixed split. The last ``scheduler.async_train_cells`` cells only train, the others
only roll out, continuously, with dispatch bounded by ``scheduler.max_staleness``. Nothing moves.

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
    if (state.train is None and take is not None
            and all(state.cells[c].phase is Phase.TRAIN for c in train_cells)):
        actions.append(StartTrain(index=state.version, cells=train_cells, take=take))
    slots = state.phase_count(Phase.ROLLOUT) * limits.slots_per_cell
    return actions + sync_weights(state) + dispatch(state, slots=slots, max_staleness=limits.max_staleness)
