"""The simulated rollout side: each cell's server with its sessions, the gateway's routing over
them, and the executions from dispatch to end; the coordinator's ``Executions`` and ``CellServers``
ports over it.

Rollout model: each server has a *work clock* V that advances at the per-session speed of its
current load (:meth:`SimulatedCosts.execution_speed`), so a session with ``r`` work-seconds left
finishes when V has advanced by ``r``; a change of load only reschedules that server's next finish.
An execution is stopped at ``time_limit_s`` of wall time after its start and finishes as timed out,
with the tokens it produced so far.

A world that takes a run over (:func:`gyrectl.sim.run.resumed_world`) starts the executions that
were running again from scratch, under their sequence numbers; their harnesses wait for a routed
server (the gateway holds their calls), within their time limit, and join the first ones routed.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from gyrectl.cluster.base import Node
from gyrectl.coordinator.events import Event, Finished, Started, WeightsSynced
from gyrectl.errors import RuntimeFailure
from gyrectl.sim.batches import SimulatedBatches
from gyrectl.sim.clock import VirtualClock
from gyrectl.sim.metrics import Accounts
from gyrectl.sim.models import CellRoles, SimulatedCosts
from gyrectl.sim.workload import Workload


class Outbox:
    """What happened since the coordinator's last poll, in order."""

    def __init__(self) -> None:
        self._events: list[Event] = []

    def append(self, event: Event) -> None:
        self._events.append(event)

    def drain(self) -> list[Event]:
        events, self._events = self._events, []
        return events


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
class _Executions:
    """Every dispatched execution, by sequence number (parallel arrays: millions at scale)."""

    server_of: list[int] = field(default_factory=list)
    """The cell whose server runs it (it may move while it runs)."""
    finish_clock: list[float] = field(default_factory=list)
    """Its server's work clock at which it finishes (matches its live session entry)."""
    version: list[int] = field(default_factory=list)
    """The weights version it was dispatched with."""
    done: bytearray = field(default_factory=bytearray)


class RolloutPool:
    """The cells' rollout servers and the executions on them: the gateway puts each new execution
    on the least-loaded routed server and, with movable executions, moves a drained server's on."""

    def __init__(self, *, clock: VirtualClock, costs: SimulatedCosts, workload: Workload, accounts: Accounts,
                 batches: SimulatedBatches, outbox: Outbox, num_cells: int, executions_movable: bool):
        self._clock, self._costs, self._workload = clock, costs, workload
        self._accounts, self._batches, self._outbox = accounts, batches, outbox
        self._movable = executions_movable
        self._servers = [_Server() for _ in range(num_cells)]
        self._routing: list[tuple[bool, int, int, int]] = []
        """Heap of (paused, load, cell, stamp) over routed servers; an entry is current only while its
        stamp is the server's (lazy deletion), so the least-loaded server is found in O(log n)."""
        self._executions = _Executions()
        self._waiting: list[int] = []
        """Executions taken over from another world that no server holds yet: they start on the
        servers routed first."""
        self._full_throughput = costs.execution_speed(costs.slots_per_server) * costs.slots_per_server

    # -- what the gateway does ------------------------------------------------------------------
    def dispatch(self, *, count: int, version: int) -> None:
        executions = self._executions
        first = len(executions.server_of)
        for seq in range(first, first + count):
            self._new_execution(version, done=False)
            self._add_session(self._least_loaded(), seq, self._workload.duration_s[seq % len(self._workload)])
            self._clock.at(self._costs.time_limit_s, self._deadline, seq)
        self._outbox.append(Started(count=count, at=self._clock.time))

    def take_over(self, running: Sequence[tuple[int, int]], *, next_seq: int) -> None:
        """Continues a run another world began: sequence numbers go on from ``next_seq``, and the
        executions that were ``running`` (``(seq, version)``) start again from scratch, their time
        limit counted from now. Their harnesses began long ago, so no ``Started`` is reported."""
        assert not self._executions.server_of, "a world takes a run over before it dispatches"
        version_of = dict(running)
        for seq in range(next_seq):
            self._new_execution(version_of.get(seq, 0), done=seq not in version_of)
        for seq, _ in running:
            self._clock.at(self._costs.time_limit_s, self._deadline, seq)
        self._waiting = [seq for seq, _ in running]
        if any(server.routed for server in self._servers):
            self._place_waiting()

    def _new_execution(self, version: int, *, done: bool) -> None:
        executions = self._executions
        executions.server_of.append(-1)
        executions.finish_clock.append(0.0)
        executions.version.append(version)
        executions.done.append(done)

    def _place_waiting(self) -> None:
        """A server is routed: the executions waiting for one start on the routed servers."""
        waiting, self._waiting = self._waiting, []
        for seq in waiting:
            if not self._executions.done[seq]:  # not stopped at its time limit meanwhile
                self._add_session(self._least_loaded(), seq, self._workload.duration_s[seq % len(self._workload)])

    def route(self, cell: int, *, routed: bool) -> None:
        """Adds a server to the gateway's routing, or drains it: with movable executions its
        sessions continue, with their remaining work plus the move cost, on the least-loaded others."""
        server = self._servers[cell]
        server.routed = routed
        self._touch(cell)
        if routed and self._waiting:
            self._place_waiting()
        if routed or not self._movable or not server.load or not any(s.routed for s in self._servers):
            return
        self._settle(cell)
        moving = [entry for entry in server.sessions if self._live(cell, entry)]
        server.sessions, server.load = [], 0
        server.generation += 1
        for finish, seq in moving:
            left = finish - server.work_clock + self._costs.sim.move_cost_s
            self._add_session(self._least_loaded(), seq, left)

    def stopped(self, cell: int) -> None:
        """The cell's server step ended: it leaves the routing (what it held stays with it)."""
        self._servers[cell].routed = False
        self._touch(cell)

    def sessions(self, cell: int) -> int:
        return self._servers[cell].load

    def pause(self, cell: int, *, paused: bool) -> None:
        """Pauses the server's sessions (it loads new weights) or resumes them."""
        self._settle(cell)
        self._servers[cell].paused = paused
        self._touch(cell)
        self._reschedule(cell)

    # -- the servers' work clocks ---------------------------------------------------------------
    def _settle(self, cell: int) -> None:
        """Brings a server's work clock and the busy-time account up to now."""
        server = self._servers[cell]
        now = self._clock.time
        elapsed = now - server.updated_at
        if server.load and not server.paused and elapsed > 0:
            speed = self._costs.execution_speed(server.load)
            server.work_clock += elapsed * speed
            self._accounts.busy_cell_s += elapsed * speed * server.load / self._full_throughput
        server.updated_at = now

    def _reschedule(self, cell: int) -> None:
        server = self._servers[cell]
        server.generation += 1
        heap = server.sessions
        while heap and not self._live(cell, heap[0]):
            heapq.heappop(heap)
        if heap and not server.paused:
            speed = self._costs.execution_speed(server.load)
            self._clock.at(max(0.0, heap[0][0] - server.work_clock) / speed, self._server_finish, cell,
                           server.generation)

    def _touch(self, cell: int) -> None:
        """A server's load, routing or pause changed: re-file it in the routing heap."""
        server = self._servers[cell]
        server.routing_stamp += 1
        if server.routed:
            heapq.heappush(self._routing, (server.paused, server.load, cell, server.routing_stamp))

    def _live(self, cell: int, entry: tuple[float, int]) -> bool:
        seq, executions = entry[1], self._executions
        return (not executions.done[seq] and executions.server_of[seq] == cell
                and executions.finish_clock[seq] == entry[0])

    def _add_session(self, cell: int, seq: int, work_s: float) -> None:
        self._settle(cell)
        server = self._servers[cell]
        finish = server.work_clock + work_s
        self._executions.server_of[seq], self._executions.finish_clock[seq] = cell, finish
        heapq.heappush(server.sessions, (finish, seq))
        server.load += 1
        self._touch(cell)
        self._reschedule(cell)

    def _least_loaded(self) -> int:
        heap = self._routing
        while heap and heap[0][3] != self._servers[heap[0][2]].routing_stamp:
            heapq.heappop(heap)
        if not heap:
            raise RuntimeFailure("no rollout server is routed: the policy dispatched into nothing")
        return heap[0][2]

    # -- an execution's end ---------------------------------------------------------------------
    def _server_finish(self, cell: int, generation: int) -> bool:
        server = self._servers[cell]
        if generation != server.generation:
            return False
        self._settle(cell)
        _, seq = heapq.heappop(server.sessions)
        self._end(seq, timed_out=False, fraction=1.0)
        return True

    def _deadline(self, seq: int) -> bool:
        executions = self._executions
        if executions.done[seq]:
            return False
        cell = executions.server_of[seq]
        if cell < 0:  # taken over, and no server was routed within its time limit: it did nothing
            self._end(seq, timed_out=True, fraction=0.0)
            return True
        self._settle(cell)
        work = self._workload.duration_s[seq % len(self._workload)]
        left = max(0.0, executions.finish_clock[seq] - self._servers[cell].work_clock)
        self._end(seq, timed_out=True, fraction=min(1.0, max(0.0, 1.0 - left / work)))
        return True

    def _end(self, seq: int, *, timed_out: bool, fraction: float) -> None:
        """Execution ``seq`` ended having done ``fraction`` of its work (1 unless timed out)."""
        executions, workload, accounts = self._executions, self._workload, self._accounts
        cell, version = executions.server_of[seq], executions.version[seq]
        executions.done[seq] = 1
        if cell >= 0:
            self._servers[cell].load -= 1
            self._touch(cell)
        accounts.work_done_s += workload.duration_s[seq % len(workload)] * fraction
        accounts.longest_work_s = max(accounts.longest_work_s, workload.duration_s[seq % len(workload)] * fraction)
        self._batches.finished(seq=seq, version=version, tokens=int(workload.tokens[seq % len(workload)] * fraction))
        self._outbox.append(Finished(seq=seq, version=version, timed_out=timed_out, at=self._clock.time))
        if cell >= 0:
            self._reschedule(cell)


class SimulatedExecutions:
    """The coordinator's ``Executions`` port: executions are virtual, their ends are the pool's."""

    def __init__(self, pool: RolloutPool, outbox: Outbox):
        self._pool, self._outbox = pool, outbox

    def dispatch(self, *, count: int, version: int) -> None:
        self._pool.dispatch(count=count, version=version)

    def take_over(self, running: Sequence[tuple[int, int]], *, next_seq: int) -> None:
        """Runs again the executions another world had running (``(seq, version)``); the next
        dispatched is ``next_seq`` (:meth:`RolloutPool.take_over`)."""
        self._pool.take_over(running, next_seq=next_seq)

    def poll(self) -> list[Event]:
        return self._outbox.drain()


class SimulatedServers:
    """The coordinator's ``CellServers`` port: a server's wake-up and weight reload take the
    switch-cost model's time; a drained one holds nothing while it sleeps."""

    def __init__(self, *, pool: RolloutPool, clock: VirtualClock, costs: SimulatedCosts, roles: CellRoles,
                 outbox: Outbox, num_cells: int):
        self._pool, self._clock, self._costs, self._roles, self._outbox = pool, clock, costs, roles, outbox
        self._awake_at = [0.0] * num_cells
        """When each cell's woken server serves again (its wake-up is the train -> rollout switch cost)."""

    def ready(self, cell: int) -> bool:
        # A started server's step start time already includes its engine's; a woken one answers
        # once its wake-up is over.
        return self._clock.time >= self._awake_at[cell]

    def route(self, cell: int, *, routed: bool, weight_version: int = 0) -> None:
        self._pool.route(cell, routed=routed)

    def sleep(self, cell: int, *, level: int) -> None:
        pass  # a drained simulated server holds nothing; its wake-up is timed by wake

    def asleep(self, cell: int) -> bool:
        return True  # at once: the rollout -> train switch cost is the training step's start

    def wake(self, cell: int) -> None:
        """A sleeping server wakes: it answers once the switch cost has passed."""
        delay = self._costs.step_start_s(role="rollout", last_role="train")
        self._roles.took(cell, "rollout")
        self._awake_at[cell] = self._clock.time + delay
        self._clock.at(delay, _woke)

    def sessions(self, cell: int) -> int:
        return self._pool.sessions(cell)

    def sync_weights(self, cell: int, version: int) -> None:
        self._pool.pause(cell, paused=True)
        self._clock.at(self._costs.sim.weight_sync_s, self._synced, cell, version)

    def _synced(self, cell: int, version: int) -> bool:
        self._pool.pause(cell, paused=False)
        self._outbox.append(WeightsSynced(cell=cell, version=version, at=self._clock.time))
        return True

    def place(self, cell: int, nodes: Sequence[Node]) -> None:
        pass  # a simulated server has no address: the pool routes by cell


def _woke() -> bool:
    """A woken server's timer: live, so the coordinator gets a round to route it."""
    return True
