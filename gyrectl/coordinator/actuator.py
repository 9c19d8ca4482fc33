"""Carries policy actions out and turns what happens into events: the only place the coordinator
touches the ``Cluster`` and the gateway. It keeps no state of its own (step ids live in the
coordinator state), so a restarted coordinator gets an equivalent actuator for free.

It also answers the faults a cluster throws, without the policy's help: a serving cell's server
step that exits on its own (killed, crashed) is started again while the gateway re-sends its calls
elsewhere; a training step that fails is started again on the same cells with the same batch
(the trainer starts each step over from its input weights). Either gives up after a few tries.
A cell whose nodes the cluster lost (``cells`` layout: a crashed node) leaves the routing, takes
the training step it was in down with it (the batch goes back to the buffer), and comes back
idle on the nodes of a replacement job once the cluster grants them.
"""

from __future__ import annotations

from collections.abc import Sequence

from gyrectl.cluster.base import Cluster, Node, StepState, StepStatus
from gyrectl.coordinator.actions import Action, Dispatch, ExtendTrain, MoveCell, StartServer, StartTrain, SyncWeights
from gyrectl.coordinator.events import (CellLost, CellPlaced, Dispatched, Event, PhaseChanged, StepFailed,
                                        SyncStarted, TrainEnded, TrainExtended, TrainRetried, TrainStarted)
from gyrectl.coordinator.ports import Clock, RolloutGateway, StepBuilder
from gyrectl.coordinator.state import CoordinatorState, Phase
from gyrectl.errors import RuntimeFailure

_WATCHED = (Phase.STARTING, Phase.RETURNING, Phase.DRAINING)
MAX_CELL_FAILURES = 3
"""Steps of one cell that may exit on their own before the run gives up (a node that keeps
killing its steps is not a fault worth retrying forever)."""
MAX_TRAIN_ATTEMPTS = 3
"""Runs of one training step before the run fails (each run has a rendezvous port of its own)."""


def cells_of(nodes: Sequence[Node], nodes_per_cell: int) -> list[tuple[str, ...]]:
    """Worker node names per cell, in node order."""
    return group_cells([node.name for node in nodes if node.het_group == 1], nodes_per_cell)


def group_cells(workers: Sequence[str], nodes_per_cell: int) -> list[tuple[str, ...]]:
    """Consecutive worker nodes, ``nodes_per_cell`` to a cell."""
    return [tuple(workers[i:i + nodes_per_cell]) for i in range(0, len(workers), nodes_per_cell)]


class Actuator:
    def __init__(self, *, cluster: Cluster, gateway: RolloutGateway, clock: Clock, steps: StepBuilder,
                 cell_nodes: Sequence[tuple[str, ...]]):
        self.cell_nodes = list(cell_nodes)
        self._cluster, self._gateway, self._clock, self._steps = cluster, gateway, clock, steps

    def act(self, action: Action, state: CoordinatorState) -> list[Event]:
        now = self._clock.now()
        match action:
            case Dispatch(count=count, version=version):
                self._gateway.dispatch(count=count, version=version)
                return [Dispatched(count=count, version=version, at=now)]
            case StartServer(cell=cell):
                return [self._start_server(cell, Phase.STARTING, state.version, now)]
            case MoveCell(cell=cell, to=Phase.ROLLOUT):
                assert state.cells[cell].phase is Phase.TRAIN and (state.train is None or cell not in state.train.cells)
                return [self._start_server(cell, Phase.RETURNING, state.version, now)]
            case MoveCell(cell=cell, to=Phase.TRAIN) if state.cells[cell].phase is Phase.IDLE:
                return [PhaseChanged(cell=cell, phase=Phase.TRAIN, at=now)]
            case MoveCell(cell=cell, to=Phase.TRAIN):
                assert state.cells[cell].phase is Phase.ROLLOUT, f"cell {cell} is not serving"
                self._gateway.route(cell, routed=False)
                return [PhaseChanged(cell=cell, phase=Phase.DRAINING, at=now, step_id=state.cells[cell].step_id,
                                     weight_version=state.cells[cell].weight_version)]
            case StartTrain(index=index, cells=cells, take=take):
                self._gateway.claim(index=index, take=take)
                step_ids = tuple(self._start_member(c, index, members=cells) for c in cells)
                return [TrainStarted(index=index, cells=cells, take=take, at=now, step_ids=step_ids)]
            case ExtendTrain(cell=cell):
                assert state.train is not None
                member = self._start_member(cell, state.train.index, members=state.train.cells + (cell,))
                return [TrainExtended(cell=cell, at=now, step_id=member)]
            case SyncWeights(cell=cell, version=version):
                self._gateway.sync_weights(cell, version)
                return [SyncStarted(cell=cell, version=version, at=now)]
        raise AssertionError(f"unhandled action {action!r}")

    def wait(self, state: CoordinatorState) -> list[Event]:
        """Waits for the world to move, then reports what changed."""
        self._clock.wait()
        return self._gateway.poll() + self.observe(state)

    def observe(self, state: CoordinatorState) -> list[Event]:
        now = self._clock.now()
        lost = self._cluster.lost_cells() - {cell.id for cell in state.cells.by_phase[Phase.LOST]}
        if lost:  # one at a time: a loss may end the training step the next one is in
            return self._lose(min(lost), state, now)
        events = self._place_lost(state, now)
        for cell in state.cells.select(_WATCHED):
            if cell.phase is Phase.DRAINING:
                if self._gateway.sessions(cell.id) == 0:  # with movable executions: at once
                    self._cluster.stop_step(cell.step_id, grace_s=0.0)
                    if self._cluster.step_status(cell.step_id).state.ended:  # stamped after the stop took
                        events.append(PhaseChanged(cell=cell.id, phase=Phase.TRAIN, at=self._clock.now()))
            elif self._server_ready(cell.id, cell.step_id):
                self._gateway.route(cell.id, routed=True, weight_version=cell.weight_version)
                events.append(PhaseChanged(cell=cell.id, phase=Phase.ROLLOUT, at=now, step_id=cell.step_id,
                                           weight_version=cell.weight_version))
        for cell in state.cells.by_phase[Phase.ROLLOUT]:
            status = self._cluster.step_status(cell.step_id)
            if status.state.ended and cell.id not in self._cluster.lost_cells():  # else: lost, next round
                events += self._restart_server(cell.id, cell.step_id, cell.failures, status.exit_code, state.version,
                                               now)
        if state.train is not None:
            events += self._observe_training(state, now)
        return events

    def _lose(self, cell: int, state: CoordinatorState, now: float) -> list[Event]:
        """Nothing the cell ran survives its nodes: its calls go to other servers, and a training
        step it was in stops on every member and gives its batch back."""
        self._gateway.route(cell, routed=False)
        members = state.train.cells if state.train is not None and cell in state.train.cells else ()
        for member in sorted({cell, *members}):
            if step_id := state.cells[member].step_id:
                self._cluster.stop_step(step_id, grace_s=0.0)
        if state.train is not None and members:
            self._gateway.release(index=state.train.index)
        return [CellLost(cell=cell, at=now, nodes=self.cell_nodes[cell])]

    def _place_lost(self, state: CoordinatorState, now: float) -> list[Event]:
        """Lost cells whose replacement nodes the cluster granted come back idle there."""
        events: list[Event] = []
        for cell in state.cells.by_phase[Phase.LOST]:
            nodes = self._cluster.replacement(cell.id)
            if nodes is None:
                continue
            self.cell_nodes[cell.id] = tuple(node.name for node in nodes)
            self._gateway.place(cell.id, self._steps.server_url(cell=cell.id, address=nodes[0].address))
            events.append(CellPlaced(cell=cell.id, nodes=self.cell_nodes[cell.id], at=now))
        return events

    def _restart_server(self, cell: int, step_id: str, failures: int, exit_code: int | None, version: int,
                        now: float) -> list[Event]:
        """A serving cell's server died under its calls: they move to other servers (or wait for
        one), and the cell starts a new server with the latest weights."""
        if failures + 1 >= MAX_CELL_FAILURES:
            raise RuntimeFailure(f"the rollout server of cell {cell} exited {failures + 1} times (last exit code "
                                 f"{exit_code}); see its step log")
        self._gateway.route(cell, routed=False)
        failed = StepFailed(cell=cell, step_id=step_id, role="rollout", exit_code=exit_code, at=now)
        return [failed, self._start_server(cell, Phase.STARTING, version, now)]

    def _server_ready(self, cell: int, step_id: str) -> bool:
        status = self._cluster.step_status(step_id)
        if status.state.ended and cell in self._cluster.lost_cells():
            return False  # its nodes are gone: the next round reports the cell lost
        if status.state.ended:
            raise RuntimeFailure(f"the rollout server of cell {cell} exited while starting "
                                 f"({status.state.value}, exit code {status.exit_code}); see its step log")
        return status.state is StepState.RUNNING and self._gateway.ready(cell)

    def _observe_training(self, state: CoordinatorState, now: float) -> list[Event]:
        assert state.train is not None
        members = [state.cells[c].step_id for c in state.train.cells]
        # Members of one rendezvous end together (torchrun fails the whole group if one fails), so
        # watching the first member says when the step ended; then every member is looked at.
        if not self._cluster.step_status(members[0]).state.ended:
            return []
        statuses = [self._cluster.step_status(step_id) for step_id in members]
        if set(state.train.cells) & self._cluster.lost_cells():
            return []  # a member's nodes are gone: the next round abandons the step, no retry on them
        if any(status.state is StepState.FAILED for status in statuses):
            return self._retry_training(state, statuses, now)
        if not any(status.state is StepState.SUCCEEDED for status in statuses):
            return []
        for status in statuses:
            if not status.state.ended:  # a member still joining when the step completed
                self._cluster.stop_step(status.step_id, grace_s=0.0)
        return [TrainEnded(index=state.train.index, at=now)]

    def _retry_training(self, state: CoordinatorState, statuses: list[StepStatus], now: float) -> list[Event]:
        train = state.train
        assert train is not None
        if train.attempt + 1 >= MAX_TRAIN_ATTEMPTS:
            raise RuntimeFailure(f"training step {train.index} failed {train.attempt + 1} times; see "
                                 f"logs/train-step{train.index}-cell*.log")
        events: list[Event] = []
        for cell, status in zip(train.cells, statuses, strict=True):
            if status.state is StepState.FAILED:
                events.append(StepFailed(cell=cell, step_id=status.step_id, role="train", exit_code=status.exit_code,
                                         at=now))
            elif not status.state.ended:
                self._cluster.stop_step(status.step_id, grace_s=0.0)  # the rest of a broken rendezvous
        step_ids = tuple(self._start_member(c, train.index, members=train.cells, attempt=train.attempt + 1)
                         for c in train.cells)
        return events + [TrainRetried(index=train.index, at=self._clock.now(), step_ids=step_ids)]

    def _start_server(self, cell: int, phase: Phase, version: int, now: float) -> PhaseChanged:
        spec = self._steps.rollout(cell=cell, nodes=self.cell_nodes[cell], version=version)
        return PhaseChanged(cell=cell, phase=phase, at=now, step_id=self._cluster.start_step(spec),
                            weight_version=version)

    def _start_member(self, cell: int, index: int, *, members: tuple[int, ...], attempt: int = 0) -> str:
        """Cell ``cell``'s member of step ``index``, whose member cells are ``members``."""
        spec = self._steps.train_member(cell=cell, nodes=self.cell_nodes[cell], index=index, members=len(members),
                                        rendezvous_host=self.cell_nodes[members[0]][0], attempt=attempt)
        return self._cluster.start_step(spec)
