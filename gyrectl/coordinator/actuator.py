"""Carries policy actions out and turns what happens into events: the only place the coordinator
touches the ``Cluster`` and the rollout side (executions, cell servers, batches). It keeps no state
of its own (step ids live in the coordinator state), so a restarted coordinator gets an equivalent
actuator for free.

It also answers the faults a cluster throws, without the policy's help, in three parts: it reads
the world (:mod:`gyrectl.coordinator.observation`), asks :mod:`gyrectl.coordinator.recovery` what
to do about it (restart a server, retry a training step, lose or place a cell, give up), and does
that here, at the edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gyrectl.cluster.base import Cluster, Node
from gyrectl.coordinator.actions import Action, Dispatch, ExtendTrain, MoveCell, StartServer, StartTrain, SyncWeights
from gyrectl.coordinator.events import (
    CellLost,
    CellPlaced,
    Dispatched,
    Event,
    PhaseChanged,
    StepFailed,
    SyncStarted,
    TrainEnded,
    TrainerReleased,
    TrainExtended,
    TrainRetried,
    TrainStarted,
)
from gyrectl.coordinator.observation import read_world
from gyrectl.coordinator.ports import (
    Batches,
    CellServers,
    Checkpoints,
    Clock,
    Executions,
    ResidentTrainers,
    StepBuilder,
)
from gyrectl.coordinator.recovery import (
    EndTraining,
    FellAsleep,
    ForgetServer,
    GiveUp,
    LoseCell,
    PlaceCell,
    Recovery,
    ReleaseTrainer,
    ReplaceWaking,
    RestartServer,
    RetryTraining,
    RouteServer,
    SleepDrained,
    StopDrained,
    recover,
)
from gyrectl.coordinator.state import CoordinatorState, Phase
from gyrectl.errors import RuntimeFailure


def cells_of(nodes: Sequence[Node], nodes_per_cell: int) -> list[tuple[str, ...]]:
    """Worker node names per cell, in node order."""
    return group_cells([node.name for node in nodes if node.het_group == 1], nodes_per_cell)


def group_cells(workers: Sequence[str], nodes_per_cell: int) -> list[tuple[str, ...]]:
    """Consecutive worker nodes, ``nodes_per_cell`` to a cell."""
    return [tuple(workers[i:i + nodes_per_cell]) for i in range(0, len(workers), nodes_per_cell)]


class Actuator:
    def __init__(self, *, cluster: Cluster, executions: Executions, servers: CellServers, batches: Batches,
                 clock: Clock, steps: StepBuilder, trainers: ResidentTrainers, cell_nodes: Sequence[tuple[str, ...]],
                 checkpoints: Checkpoints | None = None):
        """``checkpoints``: who removes old weights versions (None: nothing is removed)."""
        self.cell_nodes = list(cell_nodes)
        self._cluster, self._clock, self._steps = cluster, clock, steps
        self._executions, self._servers, self._batches = executions, servers, batches
        self._trainers, self._checkpoints = trainers, checkpoints

    def act(self, action: Action, state: CoordinatorState) -> list[Event]:
        now = self._clock.now()
        match action:
            case Dispatch(count=count, version=version):
                self._executions.dispatch(count=count, version=version)
                return [Dispatched(count=count, version=version, at=now)]
            case StartServer(cell=cell):
                return [self._start_server(cell, Phase.STARTING, state.version, now)]
            case MoveCell(cell=cell, to=Phase.ROLLOUT):
                assert state.cells[cell].phase is Phase.TRAIN and (state.train is None or cell not in state.train.cells)
                if state.cells[cell].sleeping_server:
                    return self._wake(state, cell, now)
                return [self._start_server(cell, Phase.RETURNING, state.version, now)]
            case MoveCell(cell=cell, to=Phase.TRAIN) if state.cells[cell].phase is Phase.IDLE:
                return [PhaseChanged(cell=cell, phase=Phase.TRAIN, at=now)]
            case MoveCell(cell=cell, to=Phase.TRAIN):
                assert state.cells[cell].phase is Phase.ROLLOUT, f"cell {cell} is not serving"
                self._servers.route(cell, routed=False)
                return [PhaseChanged(cell=cell, phase=Phase.DRAINING, at=now, step_id=state.cells[cell].step_id,
                                     weight_version=state.cells[cell].weight_version)]
            case StartTrain(index=index, cells=cells, take=take):
                left_out = self._batches.claim(index=index, take=take)
                return self._start_training(state, index, cells, take, now, left_out=left_out)
            case ExtendTrain(cell=cell):
                assert state.train is not None
                member = self._start_member(cell, state.train.index, members=state.train.cells + (cell,))
                return [TrainExtended(cell=cell, at=now, step_id=member)]
            case SyncWeights(cell=cell, version=version):
                self._servers.sync_weights(cell, version)
                return [SyncStarted(cell=cell, version=version, at=now)]
        raise AssertionError(f"unhandled action {action!r}")

    def wait(self, state: CoordinatorState) -> list[Event]:
        """Removes the weights versions no one reads any more (``state`` is current here: every
        event so far is in it), waits for the world to move, then reports what changed."""
        if self._checkpoints is not None:
            self._checkpoints.retain(state)
        self._clock.wait()
        return self._executions.poll() + self.observe(state)

    def observe(self, state: CoordinatorState) -> list[Event]:
        """Reads the world, decides how to answer it (:mod:`gyrectl.coordinator.recovery`), and
        carries that out, in order."""
        now = self._clock.now()
        seen = read_world(state, cluster=self._cluster, servers=self._servers, trainers=self._trainers, now=now)
        return [event for recovery in recover(state, seen) for event in self._recover(recovery, now)]

    def _recover(self, recovery: Recovery, now: float) -> list[Event]:
        match recovery:
            case LoseCell(cell=cell, stop=stop, release=index):
                self._servers.route(cell, routed=False)
                self._stop(stop)
                if index is not None:
                    self._batches.release(index=index)
                return [CellLost(cell=cell, at=now, nodes=self.cell_nodes[cell])]
            case PlaceCell(cell=cell, nodes=nodes):
                self.cell_nodes[cell] = tuple(node.name for node in nodes)
                self._servers.place(cell, nodes)
                return [CellPlaced(cell=cell, nodes=self.cell_nodes[cell], at=now)]
            case StopDrained(cell=cell, step_id=step_id, reason=reason):
                self._cluster.stop_step(step_id, grace_s=0.0)
                if not self._cluster.step_status(step_id).state.ended:
                    return []  # the stop has not taken yet: asked again next round
                took = self._clock.now()  # stamped after it took
                failed = [StepFailed(cell=cell, step_id=step_id, role="rollout", exit_code=None, at=took,
                                     reason=reason)] if reason else []
                return [*failed, PhaseChanged(cell=cell, phase=Phase.TRAIN, at=took)]
            case SleepDrained(cell=cell, level=level):
                self._servers.sleep(cell, level=level)
                return []
            case FellAsleep(cell=cell, step_id=step_id, weight_version=version):
                return [PhaseChanged(cell=cell, phase=Phase.TRAIN, at=now, weight_version=version, warm=True,
                                     sleeping_server=step_id)]
            case ForgetServer(cell=cell, step_id=step_id, exit_code=exit_code):
                return [StepFailed(cell=cell, step_id=step_id, role="rollout", exit_code=exit_code, at=now)]
            case RouteServer(cell=cell, step_id=step_id, weight_version=version):
                self._servers.route(cell, routed=True, weight_version=version)
                return [PhaseChanged(cell=cell, phase=Phase.ROLLOUT, at=now, step_id=step_id, weight_version=version)]
            case RestartServer(cell=cell, step_id=step_id, exit_code=exit_code, version=version):
                self._servers.route(cell, routed=False)
                failed = StepFailed(cell=cell, step_id=step_id, role="rollout", exit_code=exit_code, at=now)
                return [failed, self._start_server(cell, Phase.STARTING, version, now)]
            case ReplaceWaking(cell=cell, step_id=step_id, exit_code=exit_code, version=version, reason=reason):
                self._stop([step_id])
                failed = StepFailed(cell=cell, step_id=step_id, role="rollout", exit_code=exit_code, at=now,
                                    reason=reason)
                return [failed, self._start_server(cell, Phase.RETURNING, version, self._clock.now())]
            case RetryTraining():
                return self._retry_training(recovery, now)
            case EndTraining(index=index, stop=stop):
                self._stop(stop)  # members still joining when the step completed
                return [TrainEnded(index=index, at=now)]
            case ReleaseTrainer(group=group, failed=failed, stop=stop):
                self._stop(stop)
                return [*_train_failures(failed, now), TrainerReleased(group=group, at=now)]
            case GiveUp(message=message):
                raise RuntimeFailure(message)
        raise AssertionError(f"unhandled recovery {recovery!r}")

    def _retry_training(self, retry: RetryTraining, now: float) -> list[Event]:
        failed = _train_failures(retry.failed, now)
        self._stop(retry.stop)  # the rest of a broken rendezvous
        group = _group_id(retry.index, retry.attempt, now) if retry.resident else ""
        step_ids = tuple(self._start_member(c, retry.index, members=retry.cells, attempt=retry.attempt, group=group)
                         for c in retry.cells)
        return failed + [TrainRetried(index=retry.index, at=self._clock.now(), step_ids=step_ids, group=group)]

    def _start_training(self, state: CoordinatorState, index: int, cells: tuple[int, ...],
                        take: tuple[tuple[int, int, int], ...], now: float, *, left_out: int) -> list[Event]:
        """Step ``index`` on ``cells``: asked of the resident group if it is up on exactly these
        cells; otherwise that group is stopped and the step's members start (a new group when
        ``training.resident``)."""
        trainer, events = state.trainer, []
        if trainer is not None and set(trainer.cells) == set(cells):
            self._trainers.request(index=index, group=trainer.group)
            return [TrainStarted(index=index, cells=trainer.cells, take=take, at=now, step_ids=trainer.step_ids,
                                 group=trainer.group, reused=True, left_out=left_out)]
        if trainer is not None:
            self._stop(trainer.step_ids)
            events.append(TrainerReleased(group=trainer.group, at=now))
        group = _group_id(index, 0, now) if state.limits.resident_trainer else ""
        step_ids = tuple(self._start_member(c, index, members=cells, group=group) for c in cells)
        return events + [TrainStarted(index=index, cells=cells, take=take, at=now, step_ids=step_ids, group=group,
                                      left_out=left_out)]

    def _stop(self, step_ids: Iterable[str]) -> None:
        for step_id in step_ids:
            self._cluster.stop_step(step_id, grace_s=0.0)  # nothing they hold is worth waiting for

    def _wake(self, state: CoordinatorState, cell: int, now: float) -> list[Event]:
        """The cell's sleeping server is woken, then given the newest weights (always after level
        2, which discarded them). Both run off the coordinator's thread: the cell is routed once
        its server answers (:func:`gyrectl.coordinator.recovery.finish_moves`), and replaced if
        it does not within ``rollout.wake_timeout_s``."""
        asleep = state.cells[cell]
        self._servers.wake(cell)
        woke = PhaseChanged(cell=cell, phase=Phase.RETURNING, at=now, step_id=asleep.sleeping_server,
                            weight_version=asleep.weight_version, warm=True)
        if asleep.weight_version == state.version and state.limits.sleep_level < 2:
            return [woke]
        self._servers.sync_weights(cell, state.version)
        return [woke, SyncStarted(cell=cell, version=state.version, at=now)]

    def _start_server(self, cell: int, phase: Phase, version: int, now: float) -> PhaseChanged:
        spec = self._steps.rollout(cell=cell, nodes=self.cell_nodes[cell], version=version)
        return PhaseChanged(cell=cell, phase=phase, at=now, step_id=self._cluster.start_step(spec),
                            weight_version=version)

    def _start_member(self, cell: int, index: int, *, members: tuple[int, ...], attempt: int = 0,
                      group: str = "") -> str:
        """Cell ``cell``'s member of step ``index``, whose member cells are ``members``."""
        spec = self._steps.train_member(cell=cell, nodes=self.cell_nodes[cell], index=index, members=len(members),
                                        rendezvous_host=self.cell_nodes[members[0]][0], attempt=attempt,
                                        group=group)
        return self._cluster.start_step(spec)


def _train_failures(failed: Iterable[tuple[int, str, int | None]], now: float) -> list[Event]:
    """One ``StepFailed`` per failed training member ``(cell, step_id, exit_code)``."""
    return [StepFailed(cell=cell, step_id=step_id, role="train", exit_code=exit_code, at=now)
            for cell, step_id, exit_code in failed]


def _group_id(index: int, attempt: int, now: float) -> str:
    """A resident group's id: unique to the head that starts it (the clock), so a member that a
    crashed head left behind never answers a request of the next one."""
    return f"step{index}-try{attempt}-at{now:.0f}"
