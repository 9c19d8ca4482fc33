"""The simulated world: one virtual clock and the parts that run on it, each the simulated stand-in
of a port the coordinator has on a real cluster::

    VirtualClock ........................ Clock        (timers; the coordinator waits on them)
    RolloutPool   servers, sessions, routing, executions
      SimulatedExecutions ............... Executions   (dispatch; poll drains the outbox)
      SimulatedServers .................. CellServers  (route, wake, weight reload)
    SimulatedBatches .................... Batches      (finished executions, claimed by steps)
    CellSteps     steps on the cells, training work
      SimulatedCluster (sim/cluster.py) . Cluster      (start, stop, status of steps)
      SimulatedTrainers ................. ResidentTrainers
    SimulatedStepBuilder ................ StepBuilder  (steps with a typed role)

An execution's end goes pool -> batches (its tokens) and -> outbox (``Finished``); a training
member's work is its batch's tokens (``SimulatedBatches.step_tokens``).

A head that dies takes its world (its allocation) with it: the head that resumes the run gets a
new one, which takes over the run's executions (:func:`gyrectl.sim.run.resumed_world`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gyrectl.sim.batches import SimulatedBatches
from gyrectl.sim.clock import VirtualClock
from gyrectl.sim.metrics import Accounts
from gyrectl.sim.models import CellRoles, SimulatedCosts
from gyrectl.sim.rollout import Outbox, RolloutPool, SimulatedExecutions, SimulatedServers
from gyrectl.sim.steps import CellSteps, SimulatedTrainers
from gyrectl.sim.workload import Workload


@dataclass(frozen=True)
class SimulatedWorld:
    clock: VirtualClock
    executions: SimulatedExecutions
    servers: SimulatedServers
    batches: SimulatedBatches
    steps: CellSteps
    trainers: SimulatedTrainers
    accounts: Accounts
    num_cells: int
    nodes_per_cell: int


def build_world(*, costs: SimulatedCosts, workload: Workload, num_cells: int, nodes_per_cell: int,
                batch_executions: int, group_size: int, executions_movable: bool, start_s: float = 0.0
                ) -> SimulatedWorld:
    """A world with nothing running, its clock at ``start_s``."""
    clock, accounts, outbox = VirtualClock(start_s), Accounts(), Outbox()
    roles = CellRoles(costs, num_cells)
    batches = SimulatedBatches(batch_executions=batch_executions, group_size=group_size)
    pool = RolloutPool(clock=clock, costs=costs, workload=workload, accounts=accounts, batches=batches, outbox=outbox,
                       num_cells=num_cells, executions_movable=executions_movable)
    steps = CellSteps(clock=clock, costs=costs, roles=roles, accounts=accounts, batches=batches, pool=pool)
    return SimulatedWorld(
        clock=clock, executions=SimulatedExecutions(pool, outbox),
        servers=SimulatedServers(pool=pool, clock=clock, costs=costs, roles=roles, outbox=outbox, num_cells=num_cells),
        batches=batches, steps=steps, trainers=SimulatedTrainers(steps), accounts=accounts, num_cells=num_cells,
        nodes_per_cell=nodes_per_cell)
