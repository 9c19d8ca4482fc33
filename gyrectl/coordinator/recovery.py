"""How the coordinator answers what the world did, without the policy's help: pure functions from
``(CoordinatorState, Observation)`` to small frozen records that the actuator carries out.

- A starting or returning cell whose server answers (and has loaded the newest weights it was
  given) joins the routing; a draining cell whose server holds no more sessions has its server put
  to sleep (off the coordinator's thread: the cell trains once it sleeps), or its step stopped
  with sleep level 0 or when the sleep does not answer in time (its executions moved to other
  servers).
- A sleeping server that exits is forgotten: the cell cold-starts a new one when it returns. One
  that does not wake within ``rollout.wake_timeout_s``, or exits waking, is stopped and replaced
  by a cold start.
- A serving cell's server step that exits on its own (killed, crashed) is started again with the
  latest weights while the gateway re-sends its calls elsewhere; a training step that fails is
  started again on the same cells with the same batch (the trainer starts each step over from its
  input weights). Either gives up after a few tries.
- A resident trainer group's step is done once its weights are committed (its members stay up);
  a member that exits before that fails the step (retried with a new group), and one that exits
  while the group waits releases the group (the next step starts a new one).
- A cell whose nodes the cluster lost (``cells`` layout: a crashed node) leaves the routing, takes
  the training step it was in down with it (the batch goes back to the buffer), and comes back
  idle on the nodes of a replacement job once the cluster grants them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gyrectl.cluster.base import Node, StepState, StepStatus
from gyrectl.coordinator.observation import MOVING, Observation
from gyrectl.coordinator.state import CellState, CoordinatorState, Phase

MAX_CELL_FAILURES = 3
"""Steps of one cell that may exit on their own before the run gives up (a node that keeps
killing its steps is not a fault worth retrying forever)."""
MAX_TRAIN_ATTEMPTS = 3
"""Runs of one training step before the run fails (each run has a rendezvous port of its own)."""
MEMBER_SETTLE_S = 5.0
"""How long the other members of a broken training group get to end on their own before they are
stopped: a member whose worker was killed takes a moment to exit, while its peers may fail first
on the broken collective or rendezvous store, and the failure must name the cell it happened on."""


@dataclass(frozen=True)
class LoseCell:
    """Take the cell out of the routing, stop ``stop`` (its step, and every member of a training
    step it was in) and give back the batch of training step ``release`` (None: none was running)."""

    cell: int
    stop: tuple[str, ...]
    release: int | None


@dataclass(frozen=True)
class PlaceCell:
    """A lost cell has nodes again: the gateway reaches its next server there."""

    cell: int
    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class StopDrained:
    """The draining cell's server holds no sessions: stop it; the cell trains once the stop took.
    ``reason`` ``sleep_timeout``: it was to sleep but did not answer in time (a fault)."""

    cell: int
    step_id: str
    reason: str = ""


@dataclass(frozen=True)
class SleepDrained:
    """The draining cell's server holds no sessions: put it to sleep at ``level`` (off the
    coordinator's thread; asking again while it falls asleep does nothing)."""

    cell: int
    level: int


@dataclass(frozen=True)
class FellAsleep:
    """The draining cell's server sleeps: the cell trains, its server kept for the return."""

    cell: int
    step_id: str
    weight_version: int
    """The weights the server keeps while it sleeps."""


@dataclass(frozen=True)
class ForgetServer:
    """The sleeping server of a cell exited: its cell cold-starts a new one when it returns."""

    cell: int
    step_id: str
    exit_code: int | None


@dataclass(frozen=True)
class RouteServer:
    """The cell's started server answers: route calls to it."""

    cell: int
    step_id: str
    weight_version: int


@dataclass(frozen=True)
class RestartServer:
    """The serving cell's server step exited on its own: start a new one with weights ``version``."""

    cell: int
    step_id: str
    exit_code: int | None
    version: int


@dataclass(frozen=True)
class ReplaceWaking:
    """The returning cell's woken server did not answer within ``rollout.wake_timeout_s``
    (``reason`` ``wake_timeout``), or exited as it was woken (``reason`` empty): stop it and
    cold-start a new one with weights ``version``; the cell still returns."""

    cell: int
    step_id: str
    exit_code: int | None
    version: int
    reason: str


@dataclass(frozen=True)
class RetryTraining:
    """Training step ``index`` failed: record the ``failed`` members ``(cell, step_id, exit_code)``,
    stop the ones still running, and start every member again as run ``attempt``."""

    index: int
    cells: tuple[int, ...]
    attempt: int
    failed: tuple[tuple[int, str, int | None], ...]
    stop: tuple[str, ...]
    resident: bool = False
    """The step is a resident group's: the retry starts a new group."""


@dataclass(frozen=True)
class EndTraining:
    """Training step ``index`` succeeded; ``stop`` are members still joining when it completed."""

    index: int
    stop: tuple[str, ...]


@dataclass(frozen=True)
class ReleaseTrainer:
    """A member of the waiting resident group ``group`` exited: record the ``failed`` members
    ``(cell, step_id, exit_code)``, stop the rest; the next step starts a new group."""

    group: str
    failed: tuple[tuple[int, str, int | None], ...]
    stop: tuple[str, ...]


@dataclass(frozen=True)
class GiveUp:
    """A fault happened once too often (or where it cannot be answered): the run fails with ``message``."""

    message: str


Recovery = (LoseCell | PlaceCell | StopDrained | SleepDrained | FellAsleep | RouteServer | RestartServer | ForgetServer
            | ReplaceWaking | RetryTraining | EndTraining | ReleaseTrainer | GiveUp)


def recover(state: CoordinatorState, seen: Observation) -> list[Recovery]:
    """Everything to do about ``seen``, in the order it is to be done (a ``GiveUp`` ends the run
    where it stands)."""
    lost = seen.lost - {cell.id for cell in state.cells.by_phase[Phase.LOST]}
    if lost:  # one at a time: a loss may end the training step the next one is in
        return [lose_cell(state, min(lost))]
    return [*place_cells(seen), *finish_moves(state, seen), *answer_server_exits(state, seen),
            *watch_training(state, seen), *watch_trainer(state, seen)]


def lose_cell(state: CoordinatorState, cell: int) -> LoseCell:
    """Nothing the cell ran survives its nodes; a training step it was in stops on every member,
    and so does a resident trainer group it was in."""
    members = state.train.cells if state.train is not None and cell in state.train.cells else ()
    stop = tuple(step_id for member in sorted({cell, *members}) if (step_id := state.cells[member].step_id))
    stop += (state.cells[cell].sleeping_server,) if state.cells[cell].sleeping_server else ()
    if state.trainer is not None and cell in state.trainer.cells:
        stop += tuple(step_id for step_id in state.trainer.step_ids if step_id not in stop)
    return LoseCell(cell=cell, stop=stop, release=state.train.index if state.train is not None and members else None)


def place_cells(seen: Observation) -> list[PlaceCell]:
    return [PlaceCell(cell=cell, nodes=nodes) for cell, nodes in seen.granted.items()]


def finish_moves(state: CoordinatorState, seen: Observation) -> list[Recovery]:
    """Draining cells without sessions put their server to sleep (or stop it); started or woken
    servers that answer, with no weight reload under way, are routed. A woken server that does
    not answer in time, or dies waking, is replaced; the wake never held the loop up (it runs
    off the coordinator's thread), so the other cells went on meanwhile."""
    recoveries: list[Recovery] = []
    level = state.limits.sleep_level
    for cell in state.cells.select(MOVING):
        if cell.phase is Phase.DRAINING:
            if seen.sessions[cell.id] == 0:  # with movable executions: at once
                recoveries.append(_put_to_sleep(cell, level, seen.asleep.get(cell.id)))
            continue
        status, waking = seen.steps[cell.step_id], cell.phase is Phase.RETURNING and cell.warm
        if cell.id in seen.lost_later:  # lost ones are answered next round
            continue
        overdue = waking and cell.id not in seen.ready and seen.at - cell.since > state.limits.wake_timeout_s
        if (status.state.ended or overdue) and waking:
            if cell.failures + 1 >= MAX_CELL_FAILURES:
                return recoveries + [GiveUp(f"the rollout server of cell {cell.id} failed {cell.failures + 1} "
                                            f"times (last: {'did not wake in time' if overdue else 'exited waking'})"
                                            f"; see its step log")]
            recoveries.append(ReplaceWaking(cell=cell.id, step_id=cell.step_id, exit_code=status.exit_code,
                                            version=state.version, reason="" if status.state.ended else "wake_timeout"))
        elif status.state.ended:
            return recoveries + [GiveUp(f"the rollout server of cell {cell.id} exited while starting "
                                        f"({status.state.value}, exit code {status.exit_code}); see its step log")]
        elif cell.id in seen.ready and not cell.syncing:
            recoveries.append(RouteServer(cell=cell.id, step_id=cell.step_id, weight_version=cell.weight_version))
    return recoveries


def _put_to_sleep(cell: CellState, level: int, asleep: bool | None) -> Recovery:
    """A drained server: stopped (level 0, or its sleep did not answer in time), put to sleep,
    or, once it sleeps, kept while its cell trains."""
    if not level or asleep is False:
        return StopDrained(cell=cell.id, step_id=cell.step_id, reason="sleep_timeout" if level else "")
    if asleep:
        return FellAsleep(cell=cell.id, step_id=cell.step_id, weight_version=cell.weight_version)
    return SleepDrained(cell=cell.id, level=level)


def answer_server_exits(state: CoordinatorState, seen: Observation) -> list[Recovery]:
    """A server step that exited on its own counts against its cell's limit. A serving cell's
    server died under its calls: they move to other servers (or wait for one), and the cell starts
    a new server with the latest weights. A sleeping server held nothing: it is forgotten, and its
    cell starts a new one when it returns."""
    recoveries: list[Recovery] = []
    servers = state.cells.server_steps
    # Only the steps that ended are looked at (hundreds of cells serve), serving cells first, by id.
    ended = sorted((step_id for step_id, status in seen.steps.items() if step_id in servers and status.state.ended),
                   key=lambda step_id: (servers[step_id].phase is Phase.TRAIN, servers[step_id].id))
    for step_id in ended:
        cell, status = servers[step_id], seen.steps[step_id]
        if cell.id in seen.lost_later:  # lost: answered next round
            continue
        if cell.failures + 1 >= MAX_CELL_FAILURES:
            how = ", asleep" if cell.phase is Phase.TRAIN else ""
            return recoveries + [GiveUp(f"the rollout server of cell {cell.id} exited {cell.failures + 1} times "
                                        f"(last exit code {status.exit_code}{how}); see its step log")]
        recoveries.append(RestartServer(cell=cell.id, step_id=step_id, exit_code=status.exit_code,
                                        version=state.version) if cell.phase is Phase.ROLLOUT
                          else ForgetServer(cell=cell.id, step_id=step_id, exit_code=status.exit_code))
    return recoveries


def watch_training(state: CoordinatorState, seen: Observation) -> list[Recovery]:
    """An ended training step is retried if a member failed, or ended if one succeeded. A resident
    group's step ends when its weights are committed, and fails when a member exits before that."""
    train = state.train
    statuses = seen.trainer if train is not None and train.group else seen.training
    if train is None or not statuses or set(train.cells) & seen.lost_later:
        return []  # still running; or a member's nodes are gone: the next round abandons it, no retry on them
    if train.group and seen.committed:
        return [EndTraining(index=train.index, stop=())]  # the group stays up for the next step
    running = tuple(status.step_id for status in statuses if not status.state.ended)
    broke = StepState.FAILED, *((StepState.SUCCEEDED, StepState.CANCELLED) if train.group else ())
    if any(status.state in broke for status in statuses):
        if running and _settling(statuses, seen.at):
            return []
        if train.attempt + 1 >= MAX_TRAIN_ATTEMPTS:
            return [GiveUp(f"training step {train.index} failed {train.attempt + 1} times; see "
                           f"logs/train-step{train.index}-cell*.log")]
        failed = tuple((cell, status.step_id, status.exit_code)
                       for cell, status in zip(train.cells, statuses, strict=True) if status.state in broke)
        return [RetryTraining(index=train.index, cells=train.cells, attempt=train.attempt + 1, failed=failed,
                              stop=running, resident=bool(train.group))]
    if train.group or not any(status.state is StepState.SUCCEEDED for status in statuses):
        return []  # running; or every member was stopped, none finished: nothing to answer
    return [EndTraining(index=train.index, stop=running)]


def watch_trainer(state: CoordinatorState, seen: Observation) -> list[Recovery]:
    """A member of a waiting resident group that exited (crashed, killed) breaks the group."""
    trainer = state.trainer
    if trainer is None or (state.train is not None and state.train.group == trainer.group):
        return []  # none, or it trains the running step: watch_training answers for it
    if set(trainer.cells) & seen.lost_later:
        return []  # the loss is answered next round, and stops the group
    ended = [(cell, status) for cell, status in zip(trainer.cells, seen.trainer, strict=True) if status.state.ended]
    if not ended or (len(ended) < len(trainer.cells) and _settling(seen.trainer, seen.at)):
        return []
    return [ReleaseTrainer(group=trainer.group, failed=tuple((c, s.step_id, s.exit_code) for c, s in ended),
                           stop=tuple(s.step_id for s in seen.trainer if not s.state.ended))]


def _settling(statuses: tuple[StepStatus, ...], now: float) -> bool:
    """The first member of a group ended less than ``MEMBER_SETTLE_S`` ago (when that is known)."""
    ends = [status.ended_at for status in statuses if status.ended_at is not None]
    return bool(ends) and now - min(ends) < MEMBER_SETTLE_S
