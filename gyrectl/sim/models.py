"""The simulator's cost models, each one small formula over ``simulator:`` config fields.
Simulated numbers: they describe a cluster, they do not measure one."""

from __future__ import annotations

from dataclasses import dataclass

from gyrectl.config.schema import Config, SimulatorConfig


@dataclass(frozen=True)
class SimulatedCosts:
    """Everything the simulated world needs to time a run."""

    sim: SimulatorConfig
    slots_per_server: int
    """rollout.concurrency_per_server."""
    gpus_per_cell: int
    time_limit_s: float
    """rollout.execution_time_limit_s, counted in wall time from the execution's start."""

    def execution_speed(self, sessions: int) -> float:
        """Work-seconds each of ``sessions`` executions on one server gets per second. Up to the
        server's concurrency every session runs, slowed by batching; beyond it they share the
        saturated throughput."""
        c = self.slots_per_server
        running = min(sessions, c)
        throughput = running / (1.0 + self.sim.server_slowdown_at_full * running / c)
        return throughput / sessions

    def train_work_cell_s(self, tokens: int) -> float:
        """Cell-seconds of training a batch of ``tokens`` (divided among the cells that train)."""
        return tokens / (self.sim.train_tokens_per_s_per_gpu * self.gpus_per_cell)

    def step_start_s(self, *, role: str, last_role: str) -> float:
        """Start time of a step with ``role`` on a cell whose previous step had ``last_role``
        ("" = never ran one): the switch costs of the reference, a warm restart, or a cold start."""
        sim = self.sim
        if role == last_role:
            return sim.step_restart_s
        if role == "rollout":
            return sim.train_to_rollout_s if last_role == "train" else sim.engine_start_s
        return sim.rollout_to_train_s


def costs_from_config(config: Config) -> SimulatedCosts:
    return SimulatedCosts(sim=config.simulator, slots_per_server=config.rollout.concurrency_per_server,
                          gpus_per_cell=max(1, config.cells.nodes_per_cell * config.cluster.gpus_per_node),
                          time_limit_s=config.rollout.execution_time_limit_s)


class CellRoles:
    """The role of each cell's last step ("" = none yet): a cell's next switch is timed from it."""

    def __init__(self, costs: SimulatedCosts, num_cells: int):
        self._costs = costs
        self._last = [""] * num_cells

    def switch(self, cell: int, role: str) -> float:
        """Cell ``cell`` takes ``role``; returns how long the switch takes (``step_start_s``)."""
        delay = self._costs.step_start_s(role=role, last_role=self._last[cell])
        self._last[cell] = role
        return delay

    def took(self, cell: int, role: str) -> None:
        """Cell ``cell`` took ``role`` at a cost timed elsewhere (a server woken from sleep)."""
        self._last[cell] = role
