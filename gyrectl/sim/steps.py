"""The simulated steps: what the coordinator asks for (the ``StepBuilder`` port, steps that carry
their role as typed fields instead of a command line), and how they run on the cells: a step
starts after its cell's switch cost (:class:`~gyrectl.sim.models.CellRoles`), a training member
shares its step's work with the step's other members, and a resident member stays up for the
next step asked of its group (the ``ResidentTrainers`` port).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gyrectl.cluster.base import StepSpec, StepState
from gyrectl.sim.batches import SimulatedBatches
from gyrectl.sim.clock import VirtualClock
from gyrectl.sim.metrics import Accounts
from gyrectl.sim.models import CellRoles, SimulatedCosts
from gyrectl.sim.rollout import RolloutPool


@dataclass(frozen=True, kw_only=True)
class SimulatedStepSpec(StepSpec):
    """A step of the simulator's own: no command runs, its role says what the world simulates."""

    role: Literal["rollout", "train"]
    train_index: int = -1
    """The training step a training member belongs to."""
    group: str = ""
    """A resident training member's group ("": a one-shot member)."""


class SimulatedStepBuilder:
    """The coordinator's ``StepBuilder`` port for the simulated cluster (a rendezvous is not simulated)."""

    def rollout(self, *, cell: int, nodes: tuple[str, ...], version: int) -> StepSpec:
        return SimulatedStepSpec(name=f"rollout-cell{cell}", nodes=nodes, command=(), role="rollout")

    def train_member(self, *, cell: int, nodes: tuple[str, ...], index: int, members: int, rendezvous_host: str,
                     attempt: int = 0, group: str = "") -> StepSpec:
        return SimulatedStepSpec(name=f"train-step{index}-cell{cell}", nodes=nodes, command=(), role="train",
                                 train_index=index, group=group)


@dataclass
class SimulatedStep:
    """A step the simulated cluster started on one cell."""

    cell: int
    role: str
    state: StepState = StepState.PENDING
    train_index: int = -1
    group: str = ""
    """A resident trainer member's group: it stays running after its step, for the next request."""


@dataclass
class _TrainRun:
    work_cell_s: float
    members: int = 0
    updated_at: float = 0.0
    generation: int = 0
    done: bool = False
    member_ids: list[str] = field(default_factory=list)


class CellSteps:
    """Every step started on the simulated cells, and the work of the training steps."""

    def __init__(self, *, clock: VirtualClock, costs: SimulatedCosts, roles: CellRoles, accounts: Accounts,
                 batches: SimulatedBatches, pool: RolloutPool):
        self._clock, self._costs, self._roles, self._accounts = clock, costs, roles, accounts
        self._batches, self._pool = batches, pool
        self.steps: dict[str, SimulatedStep] = {}
        self.ended: set[str] = set()
        """Ids of the steps that ended, so the cluster answers "which of these ended" without
        looking at every serving cell's step every round."""
        self._trains: dict[int, _TrainRun] = {}
        self._committed: set[int] = set()

    def start(self, step: SimulatedStep) -> str:
        """Starts a step; its id is unique for the world's lifetime (like a Slurm step id)."""
        step_id = f"sim.{len(self.steps)}"
        self.steps[step_id] = step
        self._clock.at(self._roles.switch(step.cell, step.role), self._step_running, step_id)
        return step_id

    def stop(self, step_id: str) -> None:
        step = self.steps[step_id]
        if step.state.ended:
            return
        run = self._trains.get(step.train_index) if step.role == "train" else None
        if step.state is StepState.RUNNING and run is not None and step_id in run.member_ids and not run.done:
            self._settle_training(step.train_index)
            run.members -= 1
        self._step_ended(step_id, step, StepState.CANCELLED)
        if step.role == "rollout":
            self._pool.stopped(step.cell)

    def _step_running(self, step_id: str) -> bool:
        step = self.steps[step_id]
        if step.state is not StepState.PENDING:
            return False
        step.state = StepState.RUNNING
        if step.role == "train":
            self._join_training(step_id, step)
        return True

    def _step_ended(self, step_id: str, step: SimulatedStep, state: StepState) -> None:
        step.state = state
        self.ended.add(step_id)

    # -- training steps -------------------------------------------------------------------------
    def _join_training(self, step_id: str, step: SimulatedStep) -> None:
        run = self._trains.get(step.train_index)
        if run is None:
            work = self._costs.train_work_cell_s(self._batches.step_tokens[step.train_index])
            run = self._trains[step.train_index] = _TrainRun(work_cell_s=work, updated_at=self._clock.time)
        run.member_ids.append(step_id)
        if run.done:
            if not step.group:  # a resident member stays up
                self._step_ended(step_id, step, StepState.SUCCEEDED)
            return
        if run.work_cell_s <= 0:  # joined during the step's fixed overhead: nothing left to share
            return
        self._settle_training(step.train_index)
        run.members += 1
        self._reschedule_training(step.train_index)

    def _settle_training(self, index: int) -> None:
        run = self._trains[index]
        elapsed = self._clock.time - run.updated_at
        if run.members and run.work_cell_s > 0:
            used = min(run.work_cell_s, elapsed * run.members)
            run.work_cell_s -= used
            self._accounts.busy_cell_s += used
        run.updated_at = self._clock.time

    def _reschedule_training(self, index: int) -> None:
        run = self._trains[index]
        run.generation += 1
        if run.members:
            self._clock.at(run.work_cell_s / run.members, self._training_work_done, index, run.generation)

    def _training_work_done(self, index: int, generation: int) -> bool:
        run = self._trains[index]
        if generation != run.generation:
            return False
        self._settle_training(index)
        run.generation += 1
        self._clock.at(self._costs.sim.train_step_overhead_s, self._training_done, index)
        return True

    def _training_done(self, index: int) -> bool:
        run = self._trains[index]
        run.done = True
        self._committed.add(index)
        for step_id in run.member_ids:
            step = self.steps[step_id]
            if step.state is StepState.RUNNING and not step.group:  # a resident member stays up
                self._step_ended(step_id, step, StepState.SUCCEEDED)
        return True

    # -- resident trainers ----------------------------------------------------------------------
    def request_training(self, *, index: int, group: str) -> None:
        """The waiting members of ``group`` train step ``index``: each joins it after its cell's
        switch cost (no step start, the same switch model as a started member's)."""
        for step_id, step in self.steps.items():
            if step.group == group and step.state is StepState.RUNNING:
                step.train_index = index
                self._clock.at(self._roles.switch(step.cell, "train"), self._rejoin, step_id, index)

    def _rejoin(self, step_id: str, index: int) -> bool:
        step = self.steps[step_id]
        if step.state is not StepState.RUNNING or step.train_index != index:
            return False
        self._join_training(step_id, step)
        return True

    def committed(self, index: int) -> bool:
        return index in self._committed


class SimulatedTrainers:
    """The coordinator's ``ResidentTrainers`` port over the simulated steps."""

    def __init__(self, steps: CellSteps):
        self._steps = steps

    def request(self, *, index: int, group: str) -> None:
        self._steps.request_training(index=index, group=group)

    def committed(self, index: int) -> bool:
        return self._steps.committed(index)
