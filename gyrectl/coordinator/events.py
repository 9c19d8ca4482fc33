"""Transitions of the coordinator state: one frozen event per thing that happened, and
:func:`apply`, the pure fold that turns (state, event) into the next state.

Every event is also a journal record (:func:`to_record` / :func:`from_record`), so replaying a
journal through :func:`apply` rebuilds exactly the state the coordinator had.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gyrectl.coordinator.groups import OpenGroup, block_of_group, group_of
from gyrectl.coordinator.state import CellTable, CoordinatorState, Phase, TrainerGroup, TrainStep


@dataclass(frozen=True)
class Dispatched:
    """The gateway took ``count`` new executions (sequence numbers d..d+count-1) at ``version``."""

    count: int
    version: int
    at: float


@dataclass(frozen=True)
class Started:
    """Harnesses of ``count`` dispatched executions have begun."""

    count: int
    at: float


@dataclass(frozen=True)
class Finished:
    """Execution ``seq`` (dispatched at weights ``version``) ended; ``timed_out`` if stopped at the
    time limit, in which case it is scored on what it produced and trained like any other."""

    seq: int
    version: int
    timed_out: bool
    at: float
    infra_failure: bool = False
    """It ended without a reward (no output, the verifier kept failing): it is buffered and claimed
    like any other, so batches keep their place in the dispatch order, but never trained."""
    reward: float | None = None
    """Its reward (None: an infrastructure failure, or not known: a simulated execution), which
    says whether its group has a learning signal (``training.skip_uniform_groups``)."""


@dataclass(frozen=True)
class PhaseChanged:
    cell: int
    phase: Phase
    at: float
    step_id: str = ""
    weight_version: int = 0
    warm: bool = False
    """The change kept the cell's engine: its server went to sleep (to ``train``) or woke up
    (to ``returning``) instead of stopping or starting."""
    sleeping_server: str = ""
    """The server step left asleep on the cell (to ``train`` with a sleep level above 0)."""


@dataclass(frozen=True)
class TrainStarted:
    """Step ``index`` began on ``cells`` with the buffered executions ``take`` ((batch, version, count))."""

    index: int
    cells: tuple[int, ...]
    take: tuple[tuple[int, int, int], ...]
    at: float
    step_ids: tuple[str, ...] = ()
    """The cluster step of each cell's training member, in ``cells`` order."""
    group: str = ""
    """The resident trainer group that trains it ("": one-shot members)."""
    reused: bool = False
    """The group was up already (it trained the step before on the same cells): no member started."""
    left_out: int = 0
    """Of the executions taken, the infrastructure failures the batch leaves out (never trained)."""


@dataclass(frozen=True)
class TrainExtended:
    cell: int
    at: float
    step_id: str = ""


@dataclass(frozen=True)
class TrainEnded:
    """The step finished and published weights version ``index + 1``."""

    index: int
    at: float


@dataclass(frozen=True)
class StepFailed:
    """A cell's step exited on its own (killed, crashed, its node gone) instead of being stopped:
    its server is started again, or its training step retried (the events that follow say which)."""

    cell: int
    step_id: str
    role: str
    """``rollout`` or ``train``."""
    exit_code: int | None
    at: float
    reason: str = ""
    """Why it counts as failed: "" (it exited on its own), ``wake_timeout`` (a sleeping server did
    not wake within ``rollout.wake_timeout_s``; it was stopped), ``sleep_timeout`` (a drained server
    did not go to sleep in that time; it was stopped)."""


@dataclass(frozen=True)
class TrainRetried:
    """Training step ``index`` failed and starts again on the same cells with the same batch,
    from the same weights (the trainer is idempotent per step)."""

    index: int
    at: float
    step_ids: tuple[str, ...] = ()
    group: str = ""
    """The resident trainer group started for the retry ("": one-shot members)."""


@dataclass(frozen=True)
class TrainerReleased:
    """The resident trainer group ``group`` is gone: stopped because the next step trains on other
    cells, or one of its members exited while it waited. The next step starts a new group."""

    group: str
    at: float


@dataclass(frozen=True)
class Resumed:
    """A new head took over the run (``launch --resume``, or Slurm requeued the job): the old
    allocation's steps are gone, so every cell starts over idle, and a training step that was
    running gives its executions back to the buffer to be trained again from the same weights.
    Executions that were running are run again by the new head under the same sequence numbers."""

    at: float
    job_id: str = ""


@dataclass(frozen=True)
class CellLost:
    """The cluster lost the cell's nodes (a node crashed, or its Slurm daemon is gone): the cell
    holds no work until it is placed again. Its server left the routing, so its calls are re-sent
    to other servers; if it was in the training step, that step is abandoned and its executions
    go back to the buffer, to be trained again from the same weights."""

    cell: int
    at: float
    nodes: tuple[str, ...] = ()
    """The nodes it had."""


@dataclass(frozen=True)
class CellPlaced:
    """A lost cell has nodes again (a new Slurm job): it starts over idle."""

    cell: int
    nodes: tuple[str, ...]
    at: float


@dataclass(frozen=True)
class SyncStarted:
    cell: int
    version: int
    at: float


@dataclass(frozen=True)
class WeightsSynced:
    cell: int
    version: int
    at: float


@dataclass(frozen=True)
class EvalEnded:
    """Every execution of the evaluation of weights ``version`` ended (``evals.jsonl`` has its line)."""

    version: int
    at: float


Event = (Dispatched | Started | Finished | PhaseChanged | TrainStarted | TrainExtended | TrainEnded
         | StepFailed | TrainRetried | TrainerReleased | Resumed | CellLost | CellPlaced | SyncStarted
         | WeightsSynced | EvalEnded)


def _with_cell(state: CoordinatorState, cell_id: int, **changes: Any) -> CoordinatorState:
    cells = list(state.cells)
    cells[cell_id] = dataclasses.replace(cells[cell_id], **changes)
    return dataclasses.replace(state, cells=CellTable(cells))


def _add_to_buffer(buffer: tuple[tuple[int, int, int], ...], batch: int, version: int, count: int
                   ) -> tuple[tuple[int, int, int], ...]:
    counts = {(b, v): n for b, v, n in buffer}
    counts[(batch, version)] = counts.get((batch, version), 0) + count
    return tuple(sorted((b, v, n) for (b, v), n in counts.items() if n))


def _dispatched(state: CoordinatorState, e: Dispatched) -> CoordinatorState:
    assert e.count > 0
    return dataclasses.replace(state, dispatched=state.dispatched + e.count)


def _started(state: CoordinatorState, e: Started) -> CoordinatorState:
    assert state.started + e.count <= state.dispatched
    return dataclasses.replace(state, started=state.started + e.count)


def _finished(state: CoordinatorState, e: Finished) -> CoordinatorState:
    """Counts the execution; the last member of its group brings the whole group into the buffer,
    or keeps it out if it has no learning signal and ``training.skip_uniform_groups`` allows."""
    assert e.seq < state.dispatched and state.finished < state.dispatched, "finished more than dispatched"
    size = state.limits.group_size
    number = group_of(e.seq, group_size=size)
    group = (state.open_groups.get(number) or OpenGroup(ended=0, oldest_version=e.version)).with_member(
        version=e.version, reward=e.reward, infra_failure=e.infra_failure)
    buffer, skipped = state.buffer, state.skipped_uniform
    if group.ended == size and group.uniform and state.may_skip_uniform():
        skipped += size
    elif group.ended == size:
        block = block_of_group(number, group_size=size, batch_executions=state.limits.batch_executions)
        buffer = _add_to_buffer(buffer, block, group.oldest_version, size)
    open_groups = state.open_groups.put(number, group if group.ended < size else None)
    return dataclasses.replace(state, finished=state.finished + 1, timed_out=state.timed_out + e.timed_out,
                               infra_failures=state.infra_failures + e.infra_failure,
                               buffer=buffer, open_groups=open_groups, skipped_uniform=skipped)


def _phase_changed(state: CoordinatorState, e: PhaseChanged) -> CoordinatorState:
    return _with_cell(state, e.cell, phase=e.phase, since=e.at, step_id=e.step_id,
                      weight_version=e.weight_version, syncing=False, sleeping_server=e.sleeping_server,
                      warm=e.warm)


def _train_started(state: CoordinatorState, e: TrainStarted) -> CoordinatorState:
    assert state.train is None and e.index == state.version
    assert all(state.cells[c].phase is Phase.TRAIN for c in e.cells), "a serving cell cannot train"
    buffer, staleness = state.buffer, dict(state.staleness)
    for batch, version, count in e.take:
        buffer = _add_to_buffer(buffer, batch, version, -count)
        staleness[e.index - version] = staleness.get(e.index - version, 0) + count
    assert all(n > 0 for _, _, n in buffer), "took executions that were not buffered"
    executions = sum(n for _, _, n in e.take)
    cells = list(state.cells)
    for cell, step_id in zip(e.cells, e.step_ids, strict=False):
        cells[cell] = dataclasses.replace(cells[cell], step_id=step_id)
    if e.reused:
        assert state.trainer is not None and (state.trainer.group, state.trainer.cells) == (e.group, e.cells)
    else:
        assert not e.group or state.trainer is None, "a new group starts once the last one was released"
    trainer = TrainerGroup(group=e.group, cells=e.cells, step_ids=e.step_ids) if e.group else state.trainer
    return dataclasses.replace(state, buffer=buffer, cells=CellTable(cells), trained=state.trained + executions,
                               left_out=state.left_out + e.left_out,
                               staleness=tuple(sorted(staleness.items())), trainer=trainer,
                               train=TrainStep(index=e.index, cells=e.cells, executions=executions, started_at=e.at,
                                               take=e.take, group=e.group, left_out=e.left_out))


def _train_extended(state: CoordinatorState, e: TrainExtended) -> CoordinatorState:
    assert state.train is not None and e.cell not in state.train.cells
    assert state.cells[e.cell].phase is Phase.TRAIN
    state = _with_cell(state, e.cell, step_id=e.step_id)
    return dataclasses.replace(state, train=dataclasses.replace(state.train, cells=state.train.cells + (e.cell,)))


def _train_ended(state: CoordinatorState, e: TrainEnded) -> CoordinatorState:
    assert state.train is not None and state.train.index == e.index
    cells = list(state.cells)
    for cell in state.train.cells:
        cells[cell] = dataclasses.replace(cells[cell], step_id="")
    return dataclasses.replace(state, cells=CellTable(cells), train=None, version=e.index + 1)


def _step_failed(state: CoordinatorState, e: StepFailed) -> CoordinatorState:
    cell = state.cells[e.cell]
    asleep = "" if e.step_id == cell.sleeping_server else cell.sleeping_server  # a sleeping server died
    return _with_cell(state, e.cell, failures=cell.failures + 1, syncing=False, sleeping_server=asleep)


def _train_retried(state: CoordinatorState, e: TrainRetried) -> CoordinatorState:
    assert state.train is not None and state.train.index == e.index
    cells = list(state.cells)
    for cell, step_id in zip(state.train.cells, e.step_ids, strict=True):
        cells[cell] = dataclasses.replace(cells[cell], step_id=step_id)
    trainer = TrainerGroup(group=e.group, cells=state.train.cells, step_ids=e.step_ids) if e.group else None
    return dataclasses.replace(state, cells=CellTable(cells), trainer=trainer,
                               train=dataclasses.replace(state.train, attempt=state.train.attempt + 1, group=e.group))


def _trainer_released(state: CoordinatorState, e: TrainerReleased) -> CoordinatorState:
    assert state.trainer is not None and state.trainer.group == e.group
    assert state.train is None or state.train.group != e.group, "the group trains the running step"
    return dataclasses.replace(state, trainer=None)


def _resumed(state: CoordinatorState, e: Resumed) -> CoordinatorState:
    # A new allocation: lost nodes are replaced too, and no server of the old one is left to wake.
    cells = CellTable(dataclasses.replace(c, phase=Phase.IDLE, since=e.at, step_id="", syncing=False,
                                          sleeping_server="") for c in state.cells)
    return _abandon_training(dataclasses.replace(state, cells=cells, trainer=None))


def _cell_lost(state: CoordinatorState, e: CellLost) -> CoordinatorState:
    state = _with_cell(state, e.cell, phase=Phase.LOST, since=e.at, step_id="", syncing=False, sleeping_server="")
    if state.trainer is not None and e.cell in state.trainer.cells:  # its members were stopped with the cell
        state = dataclasses.replace(state, trainer=None)
    if state.train is None or e.cell not in state.train.cells:
        return state
    cells = list(state.cells)
    for member in state.train.cells:  # the other members were stopped; they wait in the pool
        cells[member] = dataclasses.replace(cells[member], step_id="")
    return _abandon_training(dataclasses.replace(state, cells=CellTable(cells)))


def _cell_placed(state: CoordinatorState, e: CellPlaced) -> CoordinatorState:
    return _with_cell(state, e.cell, phase=Phase.IDLE, since=e.at, step_id="", syncing=False, sleeping_server="")


def _abandon_training(state: CoordinatorState) -> CoordinatorState:
    """The training step in progress (if any) gives its executions back to the buffer."""
    if state.train is None:
        return state
    buffer, staleness = state.buffer, dict(state.staleness)
    for batch, version, count in state.train.take:
        buffer = _add_to_buffer(buffer, batch, version, count)
        staleness[state.train.index - version] -= count
    return dataclasses.replace(state, buffer=buffer, trained=state.trained - state.train.executions,
                               left_out=state.left_out - state.train.left_out, train=None,
                               staleness=tuple(sorted((k, n) for k, n in staleness.items() if n)))


def _sync_started(state: CoordinatorState, e: SyncStarted) -> CoordinatorState:
    return _with_cell(state, e.cell, syncing=True)


def _weights_synced(state: CoordinatorState, e: WeightsSynced) -> CoordinatorState:
    return _with_cell(state, e.cell, syncing=False, weight_version=e.version)


def _eval_ended(state: CoordinatorState, e: EvalEnded) -> CoordinatorState:
    return dataclasses.replace(state, evaluated=max(state.evaluated, e.version))


_APPLY: dict[type, Callable[[CoordinatorState, Any], CoordinatorState]] = {
    Dispatched: _dispatched, Started: _started, Finished: _finished, PhaseChanged: _phase_changed,
    TrainStarted: _train_started, TrainExtended: _train_extended, TrainEnded: _train_ended,
    StepFailed: _step_failed, TrainRetried: _train_retried, TrainerReleased: _trainer_released, Resumed: _resumed,
    CellLost: _cell_lost, CellPlaced: _cell_placed, SyncStarted: _sync_started, WeightsSynced: _weights_synced,
    EvalEnded: _eval_ended,
}
_BY_NAME = {cls.__name__: cls for cls in _APPLY}


def apply(state: CoordinatorState, event: Event) -> CoordinatorState:
    """The next state after ``event`` (pure)."""
    return _APPLY[type(event)](state, event)


def to_record(event: Event) -> dict[str, Any]:
    record = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    if isinstance(event, PhaseChanged):
        record["phase"] = event.phase.value
    return {"event": type(event).__name__, **record}


def is_event_record(record: dict[str, Any]) -> bool:
    return record.get("event") in _BY_NAME


def from_record(record: dict[str, Any]) -> Event:
    fields = dict(record)
    cls = _BY_NAME[fields.pop("event")]
    if cls is PhaseChanged:
        fields["phase"] = Phase(fields["phase"])
    if cls is TrainStarted:
        fields["cells"] = tuple(fields["cells"])
        fields["take"] = tuple(tuple(item) for item in fields["take"])
    if cls in (TrainStarted, TrainRetried):
        fields["step_ids"] = tuple(fields["step_ids"])
    if cls in (CellLost, CellPlaced):
        fields["nodes"] = tuple(fields["nodes"])
    return cls(**fields)


assert set(_APPLY) == set(Event.__args__)  # every event has a fold
