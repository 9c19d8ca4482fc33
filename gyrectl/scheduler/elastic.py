"""``elastic``: cells go where the work is.

1. Rollout keeps the cells its in-flight work and its staleness budget need:
   ``target = ceil((w + budget) / slots_per_cell)``, at least ``scheduler.min_rollout_cells`` (the
   standalone pool, lowered when lost cells leave too few to keep it and train) and, while there
   is training to do, at most all cells but one.
2. Idle cells (the run's start, a cell placed again, every cell of a resumed run) start servers up
   to the target; the rest join the training pool at once, as they have no server to drain (so a
   resumed run whose batch is ready trains it on them in the same round).
3. A training step starts as soon as a batch is ready, on the cells already in the training pool,
   and grows as more cells free up (``scheduler.grow_running_step``; otherwise freed cells wait in
   the pool for the next step, or return to rollout when it needs them).
4. Above the target, one cell at a time leaves rollout, and only while the in-flight work fits the
   remaining servers: ``w <= C_R - C_cell``. Its executions move to other servers between calls
   (the gateway re-routes them), so the cell does not wait for its slowest execution.
5. Below the target, idle training cells return; cells in a running step return when it ends.
6. New executions fill the slots of at most ``target`` servers, so load drains from a cell that
   should leave instead of being topped up forever.

Executions stopped at the time limit finish like any other (the gateway reports them) and are
trained; nothing here waits for them beyond the limit.
"""

from __future__ import annotations

import math

from gyrectl.coordinator.actions import Action, ExtendTrain, MoveCell, StartServer, StartTrain
from gyrectl.coordinator.state import TOWARD_ROLLOUT, CoordinatorState, Phase
from gyrectl.scheduler.common import dispatch, next_batch, staleness_budget, sync_weights


def decide(state: CoordinatorState, now: float) -> list[Action]:
    limits, slots = state.limits, state.limits.slots_per_cell
    take = next_batch(state)
    wants_training = state.train is not None or take is not None

    # 1. How many cells rollout needs now.
    usable = limits.num_cells - state.phase_count(Phase.LOST)
    budget = staleness_budget(state, version=state.version, max_staleness=limits.max_staleness)
    needed = math.ceil((state.in_flight + budget) / slots)
    standalone = min(limits.min_rollout_cells, usable - 1)  # with cells lost, a training cell still comes first
    target = min(usable - 1, max(standalone, needed)) if wants_training else usable

    # 2. Idle cells: servers up to the target, the rest to the pool (with no training to do, the
    #    target is every usable cell: all start).
    heading = state.phase_count(*TOWARD_ROLLOUT)
    idle = [cell.id for cell in state.cells.by_phase[Phase.IDLE]]
    room = max(0, target - heading)
    starting, joining = idle[:room], idle[room:]
    heading += len(starting)
    actions: list[Action] = [StartServer(cell=c) for c in starting] + [MoveCell(cell=c, to=Phase.TRAIN)
                                                                         for c in joining]
    actions += sync_weights(state)

    # 3. Training: start on the pool as soon as a batch is ready; every freed cell joins. The idle
    #    cells just moved are in the pool by the time these actions are carried out.
    in_step = set(state.train.cells) if state.train is not None else set()
    train_cells = state.cells.by_phase[Phase.TRAIN]
    pool = [cell.id for cell in train_cells if cell.id not in in_step] if len(train_cells) > len(in_step) else []
    pool = sorted(pool + joining) if joining else pool
    if state.train is None and take is not None and pool:
        actions.append(StartTrain(index=state.version, cells=tuple(pool), take=take))
        pool = []
    elif state.train is not None and limits.grow_running_step:
        actions += [ExtendTrain(cell=c) for c in pool]
        pool = []

    # 4./5. One cell leaves while the rest can hold its work; idle training cells come back.
    serving = state.phase_count(Phase.ROLLOUT)
    can_leave = (state.phase_count(Phase.DRAINING) == 0 and serving - 1 >= standalone
                 and state.in_flight <= (serving - 1) * slots)
    if heading > target and can_leave:
        actions.append(MoveCell(cell=_leaver(state), to=Phase.TRAIN))
        serving -= 1
    elif heading < target:
        actions += [MoveCell(cell=c, to=Phase.ROLLOUT) for c in pool[: target - heading]]

    # 6. Dispatch into at most `target` servers' slots.
    return actions + dispatch(state, slots=min(serving, target) * slots, max_staleness=limits.max_staleness)


def _leaver(state: CoordinatorState) -> int:
    """The serving cell to move: one not busy reloading weights if possible, highest id first."""
    serving = state.cells.by_phase[Phase.ROLLOUT]
    return max(serving, key=lambda cell: (not cell.syncing, cell.id)).id
