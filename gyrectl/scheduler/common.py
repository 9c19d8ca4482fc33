"""Rules every policy shares: how much may be dispatched (the staleness budget and the slots),
which buffered executions form the next batch, and keeping servers on the latest weights."""

from __future__ import annotations

from gyrectl.coordinator.actions import Action, Dispatch, StartServer, SyncWeights
from gyrectl.coordinator.state import CoordinatorState, Phase


def staleness_budget(state: CoordinatorState, *, version: int, max_staleness: int) -> int:
    """Executions that may still be dispatched with weights ``version``: execution ``seq`` belongs to
    dispatch-order block ``seq // batch``, and block ``version + max_staleness`` is the last one that
    is trained at most ``max_staleness`` versions late (exactly so under dispatch-order batches).
    Groups kept out for want of a signal (``training.skip_uniform_groups``) are made up for."""
    limits = state.limits
    allowed = (version + max_staleness + 1) * limits.batch_executions + state.skipped_uniform
    if limits.total_executions:
        allowed = min(allowed, limits.total_executions + state.skipped_uniform)
    return max(0, allowed - state.dispatched)


def serving_cells(state: CoordinatorState) -> int:
    return state.phase_count(Phase.ROLLOUT)


def dispatch(state: CoordinatorState, *, slots: int, max_staleness: int) -> list[Action]:
    """Fill up to ``slots`` in-flight executions, within the staleness budget of the oldest weights
    a serving cell still has (the gateway may route to any of them)."""
    version = state.cells.oldest_served_version
    if version is None:
        return []
    count = min(slots - state.in_flight, staleness_budget(state, version=version, max_staleness=max_staleness))
    return [Dispatch(count=count, version=version)] if count > 0 else []


def next_batch(state: CoordinatorState) -> tuple[tuple[int, int, int], ...] | None:
    """The buffered executions the next training step takes, or None if no batch is ready (or the
    step must wait for an evaluation: ``eval.blocking``).

    The buffer holds whole groups only (:mod:`gyrectl.coordinator.groups`), and the batch size
    is a multiple of the group size, so a batch is whole groups. ``completion``: the next
    ``batch_executions`` finished, oldest weights first; ``dispatch``: exactly block ``version``
    of the dispatch order, once all of it has finished."""
    size = state.next_batch_size()
    if size <= 0 or state.awaiting_eval:
        return None
    if state.limits.batch_order == "dispatch":
        block = tuple(entry for entry in state.buffer if entry[0] == state.version)
        return block if sum(n for _, _, n in block) == size else None
    if state.buffered < size:
        return None
    take, need = [], size
    for batch, version, count in sorted(state.buffer, key=lambda e: (e[1], e[0])):
        used = min(count, need)
        take.append((batch, version, used))
        need -= used
        if need == 0:
            break
    return tuple(sorted(take))


def start_idle(state: CoordinatorState, cells: range) -> list[Action]:
    return [StartServer(cell=cell.id) for cell in state.cells.by_phase[Phase.IDLE] if cell.id in cells]


def sync_weights(state: CoordinatorState) -> list[Action]:
    """A newer version exists: reload it on every serving cell that has an older one."""
    oldest = state.cells.oldest_served_version
    if oldest is None or oldest >= state.version:
        return []
    return [SyncWeights(cell=cell.id, version=state.version) for cell in state.cells.by_phase[Phase.ROLLOUT]
            if not cell.syncing and cell.weight_version < state.version]
