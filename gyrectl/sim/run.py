"""``simulate``: one run of the real coordinator loop and policy on the simulated cluster.

    from gyrectl.config import load_config
    from gyrectl.sim.run import simulate
    result = simulate(load_config("configs/sim-32nodes.yaml"), workload_spec="heavy-tail")
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gyrectl.config.schema import Config
from gyrectl.coordinator.actuator import Actuator, cells_of
from gyrectl.coordinator.events import Event
from gyrectl.coordinator.journal import Journal
from gyrectl.coordinator.loop import run_coordinator
from gyrectl.coordinator.state import Limits, initial_state, limits_from_config
from gyrectl.scheduler import POLICIES
from gyrectl.sim.cluster import SimulatedCluster
from gyrectl.sim.metrics import SimulationResult, lower_bound_s, summarize
from gyrectl.sim.models import costs_from_config
from gyrectl.sim.resume import carry_over
from gyrectl.sim.steps import SimulatedStepBuilder
from gyrectl.sim.workload import Workload, load_workload
from gyrectl.sim.world import SimulatedWorld, build_world


@dataclass
class EventLog:
    """Keeps events in memory (and in a journal file when one is given)."""

    events: list[Event] = field(default_factory=list)
    journal: Journal | None = None

    def append(self, event: Event) -> None:
        self.events.append(event)
        if self.journal is not None:
            self.journal.append(event)


@dataclass(frozen=True)
class Simulation:
    result: SimulationResult
    events: list[Event]


def simulated_limits(config: Config) -> Limits:
    """The limits a simulated run's policy works to: the real run's (``limits_from_config``), with
    the simulator's own length (``simulator.workload_size`` executions, when set) and no step
    waiting for an evaluation (the simulator runs none: with ``eval.blocking`` it would wait forever)."""
    limits = limits_from_config(config)
    total = config.simulator.workload_size or limits.total_executions
    return dataclasses.replace(limits, total_executions=total, eval_blocks_every=0, eval_blocks_start=False,
                               eval_final=False)


def simulated_world(config: Config, workload: Workload, *, start_s: float = 0.0) -> SimulatedWorld:
    limits = simulated_limits(config)
    return build_world(costs=costs_from_config(config), workload=workload, num_cells=limits.num_cells,
                       nodes_per_cell=config.cells.nodes_per_cell, batch_executions=limits.batch_executions,
                       group_size=limits.group_size, executions_movable=config.simulator.executions_movable,
                       start_s=start_s)


def resumed_world(config: Config, workload: Workload, *, journal: Sequence[Event], previous: SimulatedWorld
                  ) -> SimulatedWorld:
    """The world of a head that takes over the run ``journal`` tells of (``launch --resume``, a
    requeued job), after ``previous``'s head died: a new allocation, so none of ``previous``'s
    steps, servers, sessions or trainers, and its clock goes on from ``previous``'s. It takes over
    what the real head does (:mod:`gyrectl.sim.resume`): the executions the journal has running run
    again under their sequence numbers, and the finished ones no completed step took wait for
    training. The coordinator folds ``Resumed`` into its replayed state before it runs on it."""
    world = simulated_world(config, workload, start_s=previous.clock.now())
    carried = carry_over(journal, previous.batches)
    world.batches.take_over(carried.finished)
    world.executions.take_over(carried.running, next_seq=carried.next_seq)
    return world


def simulated_actuator(config: Config, world: SimulatedWorld) -> Actuator:
    """What a (re)started coordinator builds: its actuator over the running simulated cluster."""
    cluster = SimulatedCluster(world, gpus_per_node=config.cluster.gpus_per_node)
    return Actuator(cluster=cluster, executions=world.executions, servers=world.servers, batches=world.batches,
                    clock=world.clock, steps=SimulatedStepBuilder(), trainers=world.trainers,
                    cell_nodes=cells_of(cluster.discover(), config.cells.nodes_per_cell))


def simulate(config: Config, *, workload_spec: str | Workload, seed: int | None = None,
             journal_path: Path | None = None) -> Simulation:
    """Simulates ``config`` (its ``scheduler.policy``) on a workload preset, file or object."""
    limits = simulated_limits(config)
    costs = costs_from_config(config)
    seed = config.run.seed if seed is None else seed
    workload = workload_spec if isinstance(workload_spec, Workload) else load_workload(
        workload_spec, size=limits.total_executions, seed=seed, time_limit_s=costs.time_limit_s)
    world = simulated_world(config, workload)
    actuator = simulated_actuator(config, world)
    log = EventLog(journal=Journal(journal_path, fsync=False) if journal_path else None)
    started = time.perf_counter()
    try:
        state = run_coordinator(state=initial_state(limits), decide=POLICIES[config.scheduler.policy],
                                actuator=actuator, journal=log, now=world.clock.now)
    finally:
        if log.journal is not None:
            log.journal.close()
    wall = time.perf_counter() - started
    accounts, step_tokens = world.accounts, world.batches.step_tokens
    bound = lower_bound_s(costs=costs, num_cells=limits.num_cells, work_s=accounts.work_done_s,
                          tokens=sum(step_tokens.values()), longest_work_s=accounts.longest_work_s,
                          steps=len(step_tokens))
    result = summarize(policy=config.scheduler.policy, workload=workload, state=state, events=log.events,
                       busy_cell_s=accounts.busy_cell_s, lower_bound=bound, wall_s=wall,
                       events_processed=world.clock.events_processed + len(log.events))
    return Simulation(result=result, events=log.events)
