"""What the coordinator reads from the cluster and the cell servers each round, before it decides how to
answer faults (:mod:`gyrectl.coordinator.recovery`): one frozen record, read without starting,
stopping or routing anything.

It reads only what the state makes worth reading (the step of each cell on its way in or out of
rollout, each serving cell's server, the training step), in the same order and as lazily as the
actuator always has, because some reads tell the cluster something: on the ``cells`` layout a
step that ended is probed and its cell may then be reported lost, and the first read of a lost
cell's replacement asks Slurm for new nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gyrectl.cluster.base import Cluster, Node, StepState, StepStatus
from gyrectl.coordinator.ports import CellServers, ResidentTrainers
from gyrectl.coordinator.state import CoordinatorState, Phase

MOVING = (Phase.STARTING, Phase.RETURNING, Phase.DRAINING)
"""Cells between rollout and training, whose step (or sessions) say when the move is done."""


@dataclass(frozen=True)
class Observation:
    lost: frozenset[int] = frozenset()
    """Cells whose nodes the cluster lost, read first: the losses this round answers."""
    lost_later: frozenset[int] = frozenset()
    """The same, read again after the step statuses (a step that ended may have shown its cell
    lost): a step that ended there is not retried, and its cell's loss is answered next round."""
    granted: Mapping[int, tuple[Node, ...]] = field(default_factory=dict)
    """Replacement nodes the cluster granted, per cell the state knows as lost."""
    steps: Mapping[str, StepStatus] = field(default_factory=dict)
    """Status of the server step of every starting and returning cell, and of each serving cell's
    server and sleeping server that ended (one that is not here still runs)."""
    sessions: Mapping[int, int] = field(default_factory=dict)
    """Executions each draining cell's server still holds."""
    asleep: Mapping[int, bool] = field(default_factory=dict)
    """Draining cells without sessions whose server's sleep ended: True once it sleeps, False if
    it did not answer in time."""
    ready: frozenset[int] = frozenset()
    """Starting or returning cells whose server step runs and answers at the gateway."""
    training: tuple[StepStatus, ...] = ()
    """Every one-shot member of the training step, in its cells' order, once the step ended (empty
    while it runs, when there is none, or when a resident group trains it)."""
    trainer: tuple[StepStatus, ...] = ()
    """Every member of the resident trainer group, in its cells' order, read every round: one that
    ended broke the group."""
    committed: bool = False
    """The training step a resident group trains has committed its weights (read after ``trainer``,
    so a member that exited once it committed does not fail the step)."""
    at: float = 0.0
    """When it was read (the coordinator's clock): how long a wake has taken."""


def read_world(state: CoordinatorState, *, cluster: Cluster, servers: CellServers,
               trainers: ResidentTrainers, now: float) -> Observation:
    lost = frozenset(cluster.lost_cells())
    if lost - {cell.id for cell in state.cells.by_phase[Phase.LOST]}:
        # One loss is answered per round (it may end the training step the next one is in), and
        # nothing else is read: a replacement asked for now would be asked a round early.
        return Observation(lost=lost, at=now)
    granted = {cell.id: tuple(nodes) for cell in state.cells.by_phase[Phase.LOST]
               if (nodes := cluster.replacement(cell.id)) is not None}
    steps: dict[str, StepStatus] = {}
    sessions: dict[int, int] = {}
    asleep: dict[int, bool] = {}
    ready: set[int] = set()
    for cell in state.cells.select(MOVING):
        if cell.phase is Phase.DRAINING:
            sessions[cell.id] = servers.sessions(cell.id)
            if sessions[cell.id] == 0 and state.limits.sleep_level and (slept := servers.asleep(cell.id)) is not None:
                asleep[cell.id] = slept
            continue
        steps[cell.step_id] = status = cluster.step_status(cell.step_id)
        if status.state is StepState.RUNNING and servers.ready(cell.id):
            ready.add(cell.id)
    steps.update(cluster.ended_among(state.cells.server_steps))
    training = _training(state, cluster)
    trainer = tuple(cluster.step_status(step_id) for step_id in state.trainer.step_ids) if state.trainer else ()
    committed = state.train is not None and bool(state.train.group) and trainers.committed(state.train.index)
    ended = any(status.state.ended for status in (*steps.values(), *training, *trainer))
    lost_later = frozenset(cluster.lost_cells()) if ended else lost
    return Observation(lost=lost, lost_later=lost_later, granted=granted, steps=steps, sessions=sessions, asleep=asleep,
                       ready=frozenset(ready), training=training, trainer=trainer, committed=committed, at=now)


def _training(state: CoordinatorState, cluster: Cluster) -> tuple[StepStatus, ...]:
    if state.train is None or state.train.group:
        return ()
    members = [state.cells[c].step_id for c in state.train.cells]
    # Members of one rendezvous end together (torchrun fails the whole group if one fails), so
    # watching the first member says when the step ended; then every member is looked at.
    if not cluster.step_status(members[0]).state.ended:
        return ()
    return tuple(cluster.step_status(step_id) for step_id in members)
