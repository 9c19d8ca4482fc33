"""The simulated world: a virtual clock and an event queue, the rollout servers with their
sessions, and the training steps. :class:`~gyrectl.sim.cluster.SimulatedCluster` (steps) and
:class:`~gyrectl.sim.gateway.SimulatedGateway` (executions) are two narrow views of it, the same
two interfaces the coordinator has on a real cluster.

Rollout model: each server has a *work clock* V that advances at the per-session speed of its
current load (:meth:`SimulatedCosts.execution_speed`), so a session with ``r`` work-seconds left
finishes when V has advanced by ``r``; a change of load only reschedules that server's next finish.
An execution is stopped at ``time_limit_s`` of wall time after its start and finishes as timed out,
with the tokens it produced so far.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from gyrectl.cluster.base import StepState
from gyrectl.coordinator.events import Event, Finished, Started, WeightsSynced
from gyrectl.coordinator.ports import batch_name
from gyrectl.errors import RuntimeFailure
from gyrectl.sim.models import SimulatedCosts
from gyrectl.sim.workload import Workload


@dataclass
class _Server:
    work_clock: float = 0.0
    updated_at: float = 0.0
    sessions: list[tuple[float, int]] = field(default_factory=list)
    """Heap of (work clock at which it finishes, seq); entries of moved or timed-out sessions stay
    behind and are skipped (lazy deletion)."""
    load: int = 0
    routed: bool = False
    paused: bool = False
    generation: int = 0
    routing_stamp: int = 0


@dataclass
class SimulatedStep:
    """A step the simulated cluster started on one cell; its role comes from the step's environment."""

    cell: int
    role: str
    state: StepState = StepState.PENDING
    train_index: int = -1
    batch_ref: str = ""
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


class SimulatedWorld:
    def __init__(self, *, costs: SimulatedCosts, workload: Workload, num_cells: int, nodes_per_cell: int,
                 batch_executions: int, executions_movable: bool):
        self.costs = costs
        self._batch = batch_executions
        self.workload = workload
        self.num_cells = num_cells
        self.nodes_per_cell = nodes_per_cell
        self.movable = executions_movable
        self.now = 0.0
        self.events_processed = 0
        self.busy_cell_s = 0.0
        """Cell-seconds spent usefully: a server at its full throughput or a training member counts 1."""
        self.work_done_s = 0.0
        """Work-seconds the executions did (a timed-out one only the part it reached)."""
        self.longest_work_s = 0.0
        self.outbox: list[Event] = []
        self._queue: list[tuple[float, int, Callable[..., bool], tuple]] = []
        self._tie = itertools.count()
        self._servers = [_Server() for _ in range(num_cells)]
        self._routing: list[tuple[bool, int, int, int]] = []
        """Heap of (paused, load, cell, stamp) over routed servers; an entry is current only while its
        stamp is the server's (lazy deletion), so the least-loaded server is found in O(log n)."""
        self._server_of: list[int] = []
        self._finish_clock: list[float] = []
        self._version: list[int] = []
        self._done: bytearray = bytearray()
        self.produced_tokens: list[int] = []
        self._unclaimed: dict[tuple[int, int], list[int]] = defaultdict(list)
        self._claimed: dict[int, list[tuple[tuple[int, int], list[int]]]] = {}
        self.batch_tokens: dict[str, int] = {}
        self.steps: dict[str, SimulatedStep] = {}
        self.ended: set[str] = set()
        """Ids of the steps that ended, so the cluster answers "which of these ended" without
        looking at every serving cell's step every round."""
        self._last_role = [""] * num_cells
        self._awake_at = [0.0] * num_cells
        """When each cell's woken server serves again (its wake-up is the train -> rollout switch cost)."""
        self._trains: dict[int, _TrainRun] = {}
        self._committed: set[int] = set()
        self._full_throughput = costs.execution_speed(costs.slots_per_server) * costs.slots_per_server

    # -- the clock ------------------------------------------------------------------------------
    def at(self, delay_s: float, fn: Callable[..., bool], *args: object) -> None:
        heapq.heappush(self._queue, (self.now + delay_s, next(self._tie), fn, args))

    def advance(self) -> bool:
        """Runs the next event; the clock jumps to it. False: the event was superseded (a timer
        of a server whose load changed since), which changes nothing."""
        if not self._queue:
            raise RuntimeFailure("simulation stalled: nothing is running and the policy asks for nothing")
        self.now, _, fn, args = heapq.heappop(self._queue)
        live = fn(*args)  # handlers say whether the event was live (not superseded)
        self.events_processed += live
        return live

    # -- rollout servers ------------------------------------------------------------------------
    def _settle(self, cell: int) -> None:
        """Brings a server's work clock and the busy-time account up to now."""
        server = self._servers[cell]
        elapsed = self.now - server.updated_at
        if server.load and not server.paused and elapsed > 0:
            speed = self.costs.execution_speed(server.load)
            server.work_clock += elapsed * speed
            self.busy_cell_s += elapsed * speed * server.load / self._full_throughput
        server.updated_at = self.now

    def _reschedule(self, cell: int) -> None:
        server = self._servers[cell]
        server.generation += 1
        heap = server.sessions
        while heap and not self._live(cell, heap[0]):
            heapq.heappop(heap)
        if heap and not server.paused:
            speed = self.costs.execution_speed(server.load)
            self.at(max(0.0, heap[0][0] - server.work_clock) / speed, self._server_finish, cell, server.generation)

    def _touch(self, cell: int) -> None:
        """A server's load, routing or pause changed: re-file it in the routing heap."""
        server = self._servers[cell]
        server.routing_stamp += 1
        if server.routed:
            heapq.heappush(self._routing, (server.paused, server.load, cell, server.routing_stamp))

    def _live(self, cell: int, entry: tuple[float, int]) -> bool:
        seq = entry[1]
        return not self._done[seq] and self._server_of[seq] == cell and self._finish_clock[seq] == entry[0]

    def _add_session(self, cell: int, seq: int, work_s: float) -> None:
        self._settle(cell)
        server = self._servers[cell]
        finish = server.work_clock + work_s
        self._server_of[seq], self._finish_clock[seq] = cell, finish
        heapq.heappush(server.sessions, (finish, seq))
        server.load += 1
        self._touch(cell)
        self._reschedule(cell)

    def _server_finish(self, cell: int, generation: int) -> bool:
        server = self._servers[cell]
        if generation != server.generation:
            return False
        self._settle(cell)
        _, seq = heapq.heappop(server.sessions)
        self._end(seq, timed_out=False, fraction=1.0)
        return True

    def _deadline(self, seq: int) -> bool:
        if self._done[seq]:
            return False
        cell = self._server_of[seq]
        self._settle(cell)
        work = self.workload.duration_s[seq % len(self.workload)]
        left = max(0.0, self._finish_clock[seq] - self._servers[cell].work_clock)
        self._end(seq, timed_out=True, fraction=min(1.0, max(0.0, 1.0 - left / work)))
        return True

    def _end(self, seq: int, *, timed_out: bool, fraction: float) -> None:
        """Execution ``seq`` ended having done ``fraction`` of its work (1 unless timed out)."""
        cell = self._server_of[seq]
        self._done[seq] = 1
        self._servers[cell].load -= 1
        self._touch(cell)
        self.work_done_s += self.workload.duration_s[seq % len(self.workload)] * fraction
        self.longest_work_s = max(self.longest_work_s, self.workload.duration_s[seq % len(self.workload)] * fraction)
        self.produced_tokens[seq] = int(self.workload.tokens[seq % len(self.workload)] * fraction)
        self._unclaimed[(seq // self._batch, self._version[seq])].append(seq)
        self.outbox.append(Finished(seq=seq, version=self._version[seq], timed_out=timed_out, at=self.now))
        self._reschedule(cell)

    def _least_loaded(self) -> int:
        heap = self._routing
        while heap and heap[0][3] != self._servers[heap[0][2]].routing_stamp:
            heapq.heappop(heap)
        if not heap:
            raise RuntimeFailure("no rollout server is routed: the policy dispatched into nothing")
        return heap[0][2]

    # -- what the gateway does --------------------------------------------------------------------
    def dispatch(self, *, count: int, version: int) -> None:
        first = len(self._server_of)
        for seq in range(first, first + count):
            self._server_of.append(-1)
            self._finish_clock.append(0.0)
            self._version.append(version)
            self._done.append(0)
            self.produced_tokens.append(0)
            self._add_session(self._least_loaded(), seq, self.workload.duration_s[seq % len(self.workload)])
            self.at(self.costs.time_limit_s, self._deadline, seq)
        self.outbox.append(Started(count=count, at=self.now))

    def route(self, cell: int, *, routed: bool) -> None:
        """Adds a server to the gateway's routing, or drains it: with movable executions its
        sessions continue, with their remaining work plus the move cost, on the least-loaded others."""
        server = self._servers[cell]
        server.routed = routed
        self._touch(cell)
        if routed or not self.movable or not server.load or not any(s.routed for s in self._servers):
            return
        self._settle(cell)
        moving = [entry for entry in server.sessions if self._live(cell, entry)]
        server.sessions, server.load = [], 0
        server.generation += 1
        for finish, seq in moving:
            left = finish - server.work_clock + self.costs.sim.move_cost_s
            self._add_session(self._least_loaded(), seq, left)

    def sessions(self, cell: int) -> int:
        return self._servers[cell].load

    def wake(self, cell: int) -> None:
        """A sleeping server wakes: it answers once the switch cost has passed."""
        delay = self.costs.step_start_s(role="rollout", last_role="train")
        self._last_role[cell] = "rollout"
        self._awake_at[cell] = self.now + delay
        self.at(delay, self._woke)

    def _woke(self) -> bool:
        return True

    def awake(self, cell: int) -> bool:
        return self.now >= self._awake_at[cell]

    def sync_weights(self, cell: int, version: int) -> None:
        self._settle(cell)
        self._servers[cell].paused = True
        self._touch(cell)
        self._reschedule(cell)
        self.at(self.costs.sim.weight_sync_s, self._synced, cell, version)

    def _synced(self, cell: int, version: int) -> bool:
        self._settle(cell)
        self._servers[cell].paused = False
        self._touch(cell)
        self._reschedule(cell)
        self.outbox.append(WeightsSynced(cell=cell, version=version, at=self.now))
        return True

    def claim(self, *, index: int, take: tuple[tuple[int, int, int], ...]) -> None:
        """Reserves the buffered executions of a training step (its batch: ``batch_name(index)``)."""
        tokens, self._claimed[index] = 0, []
        for batch, version, count in take:
            pool = self._unclaimed[(batch, version)]
            assert len(pool) >= count, "the coordinator took executions the world has not finished"
            claimed, self._unclaimed[(batch, version)] = pool[:count], pool[count:]
            self._claimed[index].append(((batch, version), claimed))
            tokens += sum(self.produced_tokens[seq] for seq in claimed)
        self.batch_tokens[batch_name(index)] = tokens

    def release(self, *, index: int) -> None:
        """Puts step ``index``'s claimed executions back, first in line for the next claim."""
        for key, claimed in self._claimed.pop(index, []):
            self._unclaimed[key] = claimed + self._unclaimed[key]

    # -- steps ----------------------------------------------------------------------------------
    def start_step(self, step: SimulatedStep) -> str:
        """Starts a step; its id is unique for the world's lifetime (like a Slurm step id)."""
        step_id = f"sim.{len(self.steps)}"
        self.steps[step_id] = step
        delay = self.costs.step_start_s(role=step.role, last_role=self._last_role[step.cell])
        self._last_role[step.cell] = step.role
        self.at(delay, self._step_running, step_id)
        return step_id

    def _step_running(self, step_id: str) -> bool:
        step = self.steps[step_id]
        if step.state is not StepState.PENDING:
            return False
        step.state = StepState.RUNNING
        if step.role == "train":
            self._join_training(step_id, step)
        return True

    def stop_step(self, step_id: str) -> None:
        step = self.steps[step_id]
        if step.state.ended:
            return
        run = self._trains.get(step.train_index) if step.role == "train" else None
        if step.state is StepState.RUNNING and run is not None and step_id in run.member_ids and not run.done:
            self._settle_training(step.train_index)
            run.members -= 1
        self._step_ended(step_id, step, StepState.CANCELLED)
        if step.role == "rollout":
            self._servers[step.cell].routed = False
            self._touch(step.cell)

    def _join_training(self, step_id: str, step: SimulatedStep) -> None:
        run = self._trains.get(step.train_index)
        if run is None:
            work = self.costs.train_work_cell_s(self.batch_tokens[step.batch_ref])
            run = self._trains[step.train_index] = _TrainRun(work_cell_s=work, updated_at=self.now)
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
        elapsed = self.now - run.updated_at
        if run.members and run.work_cell_s > 0:
            used = min(run.work_cell_s, elapsed * run.members)
            run.work_cell_s -= used
            self.busy_cell_s += used
        run.updated_at = self.now

    def _reschedule_training(self, index: int) -> None:
        run = self._trains[index]
        run.generation += 1
        if run.members:
            self.at(run.work_cell_s / run.members, self._training_work_done, index, run.generation)

    def _training_work_done(self, index: int, generation: int) -> bool:
        run = self._trains[index]
        if generation != run.generation:
            return False
        self._settle_training(index)
        run.generation += 1
        self.at(self.costs.sim.train_step_overhead_s, self._training_done, index)
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

    def _step_ended(self, step_id: str, step: SimulatedStep, state: StepState) -> None:
        step.state = state
        self.ended.add(step_id)

    # -- resident trainers ------------------------------------------------------------------------
    def request_training(self, *, index: int, group: str) -> None:
        """The waiting members of ``group`` train step ``index``: each joins it after its cell's
        switch cost (no step start, the same switch model as a started member's)."""
        for step_id, step in self.steps.items():
            if step.group == group and step.state is StepState.RUNNING:
                step.train_index, step.batch_ref = index, batch_name(index)
                delay = self.costs.step_start_s(role="train", last_role=self._last_role[step.cell])
                self._last_role[step.cell] = "train"
                self.at(delay, self._rejoin, step_id, index)

    def _rejoin(self, step_id: str, index: int) -> bool:
        step = self.steps[step_id]
        if step.state is not StepState.RUNNING or step.train_index != index:
            return False
        self._join_training(step_id, step)
        return True

    def committed(self, index: int) -> bool:
        return index in self._committed
