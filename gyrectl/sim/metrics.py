"""What a simulated run measured, computed from its events and the world's accounts, and the
work-conserving lower bound it is compared with."""

from __future__ import annotations

from dataclasses import dataclass

from gyrectl.coordinator.events import Event, PhaseChanged, TrainEnded
from gyrectl.coordinator.state import CoordinatorState, Phase
from gyrectl.sim.models import SimulatedCosts
from gyrectl.sim.workload import Workload


@dataclass
class Accounts:
    """What the simulated world counts as it runs (the rollout servers and the training steps add to it)."""

    busy_cell_s: float = 0.0
    """Cell-seconds spent usefully: a server at its full throughput or a training member counts 1."""
    work_done_s: float = 0.0
    """Work-seconds the executions did (a timed-out one only the part it reached)."""
    longest_work_s: float = 0.0
    """The most work one execution did."""


@dataclass(frozen=True)
class SimulationResult:
    policy: str
    workload: str
    makespan_s: float
    executions_trained: int
    throughput_per_hour: float
    gpu_idle_fraction: float
    lower_bound_s: float
    switches: int
    steps: int
    time_per_step_s: float
    step_times_s: tuple[float, ...]
    timed_out: int
    staleness: dict[int, int]
    events: int
    wall_s: float
    events_per_s: float

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def lower_bound_s(*, costs: SimulatedCosts, num_cells: int, work_s: float, tokens: int, longest_work_s: float,
                  steps: int) -> float:
    """No schedule doing the same work beats this: every cell busy all the time, servers always at
    full throughput, no switch costs; nor the longest execution followed by one step on all cells.
    ``work_s`` and ``tokens`` are what the run really executed and trained (a timed-out execution
    counts only the part it reached), so the bound is for the run's own work."""
    full = costs.execution_speed(costs.slots_per_server) * costs.slots_per_server
    cell_s = work_s / full + costs.train_work_cell_s(tokens) + steps * costs.sim.train_step_overhead_s
    last_step = costs.train_work_cell_s(tokens // max(1, steps)) / num_cells + costs.sim.train_step_overhead_s
    return max(cell_s / num_cells, longest_work_s + last_step)


def summarize(*, policy: str, workload: Workload, state: CoordinatorState, events: list[Event], busy_cell_s: float,
              lower_bound: float, wall_s: float, events_processed: int) -> SimulationResult:
    ends = [e.at for e in events if isinstance(e, TrainEnded)]
    makespan = ends[-1] if ends else 0.0
    steps = [b - a for a, b in zip([0.0] + ends, ends, strict=False)]
    switches = sum(1 for e in events if isinstance(e, PhaseChanged) and e.phase in (Phase.DRAINING, Phase.RETURNING))
    num_cells = state.limits.num_cells
    return SimulationResult(
        policy=policy, workload=workload.name, makespan_s=round(makespan, 3), executions_trained=state.trained,
        throughput_per_hour=round(state.trained / makespan * 3600, 3) if makespan else 0.0,
        gpu_idle_fraction=round(1 - busy_cell_s / (num_cells * makespan), 4) if makespan else 1.0,
        lower_bound_s=round(lower_bound, 3), switches=switches, steps=len(ends),
        time_per_step_s=round(makespan / len(ends), 3) if ends else 0.0,
        step_times_s=tuple(round(s, 3) for s in steps), timed_out=state.timed_out, staleness=dict(state.staleness),
        events=events_processed, wall_s=round(wall_s, 3),
        events_per_s=round(events_processed / wall_s) if wall_s else 0.0)
