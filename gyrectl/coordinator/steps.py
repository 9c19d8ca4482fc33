"""The two kinds of step the coordinator starts on a cell, as ``StepSpec``s: a rollout server and
a training member (one per cell; members of one training step join the same rendezvous, so the
step grows when a cell joins). The environment tells the step (and the simulated cluster) its role.
"""

from __future__ import annotations

from dataclasses import dataclass

from gyrectl.cluster.base import StepSpec
from gyrectl.config.schema import Config


@dataclass(frozen=True)
class StepFactory:
    rollout_command: tuple[str, ...]
    train_command: tuple[str, ...]
    gpus_per_node: int
    cpus_per_node: int

    def rollout(self, *, cell: int, nodes: tuple[str, ...], version: int) -> StepSpec:
        env = {"GYRECTL_ROLE": "rollout", "GYRECTL_CELL": str(cell), "GYRECTL_WEIGHTS_VERSION": str(version)}
        return StepSpec(name=f"rollout-cell{cell}", nodes=nodes, command=self.rollout_command, env=env,
                        cpus_per_node=self.cpus_per_node, gpus_per_node=self.gpus_per_node)

    def train_member(self, *, cell: int, nodes: tuple[str, ...], index: int, batch: str) -> StepSpec:
        env = {"GYRECTL_ROLE": "train", "GYRECTL_CELL": str(cell), "GYRECTL_TRAIN_STEP": str(index),
               "GYRECTL_BATCH": batch}
        return StepSpec(name=f"train-step{index}-cell{cell}", nodes=nodes, command=self.train_command, env=env,
                        cpus_per_node=self.cpus_per_node, gpus_per_node=self.gpus_per_node)


def step_factory(config: Config) -> StepFactory:
    """Commands from the config: vLLM's server with the model's parallel layout, and the trainer
    entrypoint run by torchrun with an elastic node range (the Slurm issue renders them from
    ``slurm_templates/``)."""
    model = config.model
    engine_args = tuple(arg for key, value in config.rollout.engine_args.items()
                        for arg in (f"--{key}", str(value)))
    max_nodes = config.cluster.nodes
    return StepFactory(
        rollout_command=("vllm", "serve", model.path, "--tensor-parallel-size", str(model.tensor_parallel),
                         "--pipeline-parallel-size", str(model.pipeline_parallel), *engine_args),
        train_command=("torchrun", f"--nnodes=1:{max_nodes}", "--rdzv-backend=c10d", "-m", "gyrectl.train"),
        gpus_per_node=config.cluster.gpus_per_node, cpus_per_node=config.cluster.cpus_per_node)
