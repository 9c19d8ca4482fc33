"""What the coordinator knows: frozen dataclasses, changed only by folding events into them
(:mod:`gyrectl.coordinator.events`), so a journal of events rebuilds the same state.

Counters are global, not per cell: the gateway moves an execution between servers between its
calls, so in-flight work belongs to the rollout pool as a whole (w = dispatched - finished), and
the capacity rule compares it with the pool's slots.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Literal

from gyrectl.config.schema import Config
from gyrectl.coordinator.groups import OpenGroups


class Phase(str, Enum):
    """Where a cell is in its role cycle::

        idle -> starting -> rollout -> draining -> train -> returning -> rollout ...
        (any) -> lost
    """

    IDLE = "idle"
    """No step on the cell yet."""
    STARTING = "starting"
    """Rollout server cold-starting (engine load)."""
    ROLLOUT = "rollout"
    """Server healthy and in the gateway's routing."""
    DRAINING = "draining"
    """Left the routing; its executions move to other servers, then its server sleeps (or stops)."""
    TRAIN = "train"
    """In the training pool: in the current training step, or waiting for the next one."""
    RETURNING = "returning"
    """Training left; rollout server waking up (or cold-starting), then loading the newest weights."""
    LOST = "lost"
    """Its nodes failed; holds no work."""


TOWARD_ROLLOUT = (Phase.STARTING, Phase.ROLLOUT, Phase.RETURNING)


@dataclass(frozen=True)
class CellState:
    id: int
    """Index of the cell (0-based, in node order)."""
    phase: Phase = Phase.IDLE
    """Current phase; the step on the cell is a rollout server in every phase but ``train``
    (and ``idle``, ``lost``): see :mod:`gyrectl.coordinator.views`."""
    since: float = 0.0
    """Clock time the cell entered ``phase``."""
    step_id: str = ""
    """The cluster step now running on the cell (rollout server or training member)."""
    weight_version: int = 0
    """Weights version the cell's server serves (meaningful while it serves)."""
    syncing: bool = False
    """A weight reload is in progress on the server."""
    failures: int = 0
    """Steps of this cell that exited on their own (killed, crashed): each was restarted."""
    warm: bool = False
    """The cell's last phase change kept its engine (its server slept or woke up)."""
    sleeping_server: str = ""
    """The cell's rollout server step while it sleeps (the cell trains, or waits to): woken
    instead of started when the cell returns to rollout (``rollout.sleep_level`` 1 or 2)."""


class CellTable(tuple[CellState, ...]):
    """The cells, in id order: a tuple that remembers its per-phase views. A new table is built
    only when a cell changes (rare), while the state is rebuilt on every event, so policies can ask
    "which cells are serving" in O(1) instead of scanning hundreds of cells per decision."""

    def __new__(cls, cells: Iterable[CellState]) -> CellTable:
        return super().__new__(cls, cells)

    @cached_property
    def by_phase(self) -> dict[Phase, tuple[CellState, ...]]:
        groups: dict[Phase, list[CellState]] = {phase: [] for phase in Phase}
        for cell in self:
            groups[cell.phase].append(cell)
        return {phase: tuple(cells) for phase, cells in groups.items()}

    @cached_property
    def counts(self) -> dict[Phase, int]:
        return {phase: len(cells) for phase, cells in self.by_phase.items()}

    @cached_property
    def _selections(self) -> dict[tuple[Phase, ...], list[CellState]]:
        return {}

    @cached_property
    def server_steps(self) -> dict[str, CellState]:
        """The cell of every serving cell's server step, then of every sleeping server's, by step
        id: the steps whose exit the coordinator answers each round (remembered per table)."""
        serving = {cell.step_id: cell for cell in self.by_phase[Phase.ROLLOUT]}
        return serving | {cell.sleeping_server: cell for cell in self.by_phase[Phase.TRAIN] if cell.sleeping_server}

    def select(self, phases: tuple[Phase, ...]) -> list[CellState]:
        """Cells in any of ``phases``, in id order (remembered per table)."""
        found = self._selections.get(phases)
        if found is None:
            found = self._selections[phases] = sorted(
                (cell for phase in phases for cell in self.by_phase[phase]), key=lambda cell: cell.id)
        return found

    @cached_property
    def oldest_served_version(self) -> int | None:
        """The oldest weights a serving cell has (None when no cell serves)."""
        serving = self.by_phase[Phase.ROLLOUT]
        return min(cell.weight_version for cell in serving) if serving else None


@dataclass(frozen=True)
class Limits:
    """The run's fixed numbers the policies need, taken from the config once."""

    num_cells: int
    slots_per_cell: int
    """Executions one rollout server serves at once (rollout.concurrency_per_server)."""
    batch_executions: int
    max_staleness: int
    group_size: int = 1
    """Executions of one task that form a GRPO group (``rollout.executions_per_task``): the buffer
    takes finished executions a whole group at a time (:mod:`gyrectl.coordinator.groups`)."""
    uniform_skips_per_step: int = 0
    """Executions of groups without a signal that may be kept out of the buffer, per training step
    so far (``training.skip_uniform_groups``: ``batch_executions x (max_batch_draws - 1)``; 0: none)."""
    min_rollout_cells: int = 0
    async_train_cells: int = 1
    total_executions: int = 0
    """Executions the run trains in all (0 = no end; the last batch may be smaller)."""
    batch_order: Literal["completion", "dispatch"] = "completion"
    """How a batch is formed (``scheduler.batch_order``)."""
    grow_running_step: bool = False
    """Cells freed during a training step join it (see ``scheduler.grow_running_step``)."""
    sleep_level: int = 0
    """A drained server sleeps at this level instead of stopping (0: it stops; ``rollout.sleep_level``)."""
    resident_trainer: bool = False
    """A training group stays up between steps on the same cells (``training.resident``)."""
    wake_timeout_s: float = math.inf
    """A woken server not answering after this long is replaced (``rollout.wake_timeout_s``)."""
    eval_blocks_every: int = 0
    """A training step waits for the evaluation of the weights it starts from when their version
    is a multiple of this (``eval.every_steps`` with ``eval.blocking``; 0: never)."""
    eval_blocks_start: bool = False
    """The first training step waits for the evaluation of the starting weights (``eval.at_start``
    with ``eval.blocking``)."""
    eval_final: bool = False
    """The run is done only once its final weights were evaluated (``eval.at_end``)."""


@dataclass(frozen=True)
class TrainStep:
    index: int
    """Step number; it trains weights version ``index`` into ``index + 1``."""
    cells: tuple[int, ...]
    """Cells in the step so far (it grows when cells join)."""
    executions: int
    started_at: float
    attempt: int = 0
    """How many times the step was started again after failing (0: the first run)."""
    take: tuple[tuple[int, int, int], ...] = ()
    """The buffered executions it took, ``(batch, version, count)`` (given back if it is abandoned)."""
    group: str = ""
    """The resident trainer group that trains it ("": one-shot members, whose exit says it is done)."""
    left_out: int = 0
    """Of ``executions``, the infrastructure failures its batch leaves out."""


@dataclass(frozen=True)
class TrainerGroup:
    """A resident training group: one member step per cell, up between steps while its cells
    serve or sleep, asked to train each next step on the same cells (``training.resident``)."""

    group: str
    """The id its members answer to (``GYRECTL_TRAINER_GROUP``; requests name it)."""
    cells: tuple[int, ...]
    step_ids: tuple[str, ...]
    """Each cell's member step, in ``cells`` order."""


@dataclass(frozen=True)
class CoordinatorState:
    limits: Limits
    cells: CellTable
    dispatched: int = 0
    """d: executions handed to the gateway (sequence numbers 0..d-1)."""
    started: int = 0
    """p: executions whose harness has begun."""
    finished: int = 0
    """f: executions that ended (completed or stopped at the time limit); both are trained."""
    timed_out: int = 0
    """Of ``finished``, those stopped at rollout.execution_time_limit_s."""
    infra_failures: int = 0
    """Of ``finished``, those that ended without a reward (never trained)."""
    trained: int = 0
    """Executions taken by training steps so far (what the schedule counts: infrastructure
    failures too, which their batches leave out)."""
    left_out: int = 0
    """Of ``trained``, the infrastructure failures: ``trained - left_out`` were trained."""
    version: int = 0
    """Latest weights version published by the trainer (= training steps completed)."""
    buffer: tuple[tuple[int, int, int], ...] = ()
    """Finished, not yet trained executions of whole groups as sorted ``(batch, version, count)``:
    ``version`` is the weights their group's oldest member was dispatched with, ``batch`` their
    dispatch-order block (seq // batch); every count is a multiple of the group size."""
    open_groups: OpenGroups = field(default_factory=OpenGroups, hash=False)
    """Groups some of whose members ended (not yet buffered), by group number."""
    skipped_uniform: int = 0
    """Of ``finished``, executions of groups without a learning signal kept out of the buffer
    (``training.skip_uniform_groups``): never trained, and made up for by more dispatches."""
    train: TrainStep | None = None
    """The training step in progress, if any."""
    trainer: TrainerGroup | None = None
    """The resident training group that is up (training ``train``, or waiting for the next step)."""
    staleness: tuple[tuple[int, int], ...] = ()
    """Histogram ``(versions behind, executions)`` of everything trained so far."""
    evaluated: int = -1
    """The newest weights version whose evaluation ended (-1: none yet; 0: the starting weights)."""

    @property
    def in_flight(self) -> int:
        """w = d - f."""
        return self.dispatched - self.finished

    @property
    def awaiting_eval(self) -> bool:
        """The next training step must wait for the evaluation of the latest weights."""
        every = self.limits.eval_blocks_every
        due = self.limits.eval_blocks_start if self.version == 0 else every > 0 and self.version % every == 0
        return due and self.evaluated < self.version

    @property
    def buffered(self) -> int:
        return sum(count for _, _, count in self.buffer)

    @property
    def done(self) -> bool:
        """Every step trained and, with ``eval_final``, the final weights evaluated (the policies
        keep serving the newest weights after the last step, so that evaluation can run)."""
        total = self.limits.total_executions
        trained = total > 0 and self.trained >= total and self.train is None
        return trained and (not self.limits.eval_final or self.evaluated >= self.version)

    def phase_count(self, *phases: Phase) -> int:
        counts = self.cells.counts
        return sum(counts[phase] for phase in phases)

    def cells_in(self, *phases: Phase) -> list[CellState]:
        return list(self.cells.select(phases))

    def may_skip_uniform(self) -> bool:
        """One more group without a signal may be kept out: within the draws allowed so far."""
        allowance = (self.version + 1) * self.limits.uniform_skips_per_step
        return self.skipped_uniform + self.limits.group_size <= allowance

    def next_batch_size(self) -> int:
        total = self.limits.total_executions
        batch = self.limits.batch_executions
        return batch if total == 0 else min(batch, total - self.trained)


def initial_state(limits: Limits) -> CoordinatorState:
    return CoordinatorState(limits=limits, cells=CellTable(CellState(id=i) for i in range(limits.num_cells)))


def limits_from_config(config: Config) -> Limits:
    """The run's limits: it trains ``run.steps`` batches (the simulator sets its own length:
    :func:`gyrectl.sim.run.simulated_limits`)."""
    total, evaluation = config.run.steps * config.training.batch_executions, config.eval
    return Limits(num_cells=config.num_cells, slots_per_cell=config.rollout.concurrency_per_server,
                  batch_executions=config.training.batch_executions, max_staleness=config.scheduler.max_staleness,
                  group_size=config.rollout.executions_per_task,
                  uniform_skips_per_step=(config.training.batch_executions * (config.training.max_batch_draws - 1)
                                          if config.training.skip_uniform_groups else 0),
                  min_rollout_cells=config.scheduler.min_rollout_cells,
                  async_train_cells=config.scheduler.async_train_cells, total_executions=total,
                  batch_order=config.scheduler.batch_order, grow_running_step=config.scheduler.grow_running_step,
                  sleep_level=config.rollout.sleep_level, wake_timeout_s=config.wake_timeout_s,
                  resident_trainer=config.training.resident and not config.scheduler.grow_running_step,
                  eval_blocks_every=config.eval.every_steps if config.eval.blocking else 0,
                  eval_blocks_start=evaluation.evaluates and evaluation.at_start and evaluation.blocking,
                  eval_final=evaluation.evaluates and evaluation.at_end)
