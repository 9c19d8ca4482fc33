"""The simulated ``Cluster`` backend: steps on virtual nodes that start, run and end on the
simulated world's virtual clock (:mod:`gyrectl.sim.steps`). Nothing runs; it is what
``gyrectl simulate`` and the coordinator's tests drive.

It runs the simulator's own steps (:class:`~gyrectl.sim.steps.SimulatedStepSpec`, whose role is a
typed field); a step's start time comes from the switch-cost model; a training member ends when
its step has done the batch's work.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from gyrectl.cluster.base import Cluster, Node, StepSpec, StepStatus
from gyrectl.sim.steps import SimulatedStep, SimulatedStepSpec
from gyrectl.sim.world import SimulatedWorld


class SimulatedCluster(Cluster):
    backend = "simulated"

    def __init__(self, world: SimulatedWorld, *, gpus_per_node: int):
        self._steps = world.steps
        self._gpus = gpus_per_node
        self._nodes = [f"sim-node{i}" for i in range(world.num_cells * world.nodes_per_cell)]
        self._cell_of = {name: i // world.nodes_per_cell for i, name in enumerate(self._nodes)}

    def discover(self) -> Sequence[Node]:
        head = Node(name="sim-head", het_group=0, gpus=0, cpus=1)
        return [head] + [Node(name=name, het_group=1, gpus=self._gpus, cpus=1) for name in self._nodes]

    def start_step(self, spec: StepSpec) -> str:
        assert isinstance(spec, SimulatedStepSpec), "the simulated cluster runs the simulator's steps (sim.steps)"
        cells = {self._cell_of[node] for node in spec.nodes}
        assert len(cells) == 1, "a simulated step runs on exactly one cell"
        return self._steps.start(SimulatedStep(cell=cells.pop(), role=spec.role, train_index=spec.train_index,
                                               group=spec.group))

    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        self._steps.stop(step_id)

    def step_status(self, step_id: str) -> StepStatus:
        return StepStatus(step_id=step_id, state=self._steps.steps[step_id].state)

    def ended_among(self, step_ids: Iterable[str]) -> dict[str, StepStatus]:
        ended = self._steps.ended
        if isinstance(step_ids, Collection) and len(ended) < len(step_ids):  # every round: walk the smaller
            found: Iterable[str] = [step_id for step_id in ended if step_id in step_ids]
        else:
            found = ended.intersection(step_ids)
        return {step_id: self.step_status(step_id) for step_id in found}
