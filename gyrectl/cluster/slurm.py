"""The Slurm backend, used from inside the heterogeneous allocation (on the head component).

Discovery reads the allocation from the environment Slurm gives the batch script
(``SLURM_JOB_NODELIST_HET_GROUP_<k>``, ``SLURM_JOB_CPUS_PER_NODE_HET_GROUP_<k>``) and asks
``scontrol`` for hostnames, node addresses and GPUs. A step is ``srun --het-group=1 --exact``
pinned to explicit nodes, so several role steps share the allocation without blocking each other.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from gyrectl.cluster.base import Cluster, Node, StepSpec, StepStatus
from gyrectl.cluster.processes import ProcessSteps
from gyrectl.cluster.slurm_cli import expand_hostlist, parse_cpus_per_node, parse_key_values, run_slurm
from gyrectl.errors import RuntimeFailure

WORKER_GROUP = 1


def discover_allocation(env: Mapping[str, str]) -> list[Node]:
    """The nodes of the job this process runs in, head component first."""
    if "SLURM_JOB_ID" not in env:
        raise RuntimeFailure("not inside a Slurm allocation (SLURM_JOB_ID is unset)")
    groups = int(env.get("SLURM_HET_SIZE", "1"))
    nodes: list[Node] = []
    for group in range(groups):
        suffix = f"_HET_GROUP_{group}" if groups > 1 else ""
        names = expand_hostlist(env[f"SLURM_JOB_NODELIST{suffix}"])
        cpus = parse_cpus_per_node(env.get(f"SLURM_JOB_CPUS_PER_NODE{suffix}", ""))
        job_id = env.get(f"SLURM_JOB_ID{suffix}", env["SLURM_JOB_ID"])
        gpus = _gpus_per_node(job_id)
        for i, name in enumerate(names):
            nodes.append(Node(name=name, het_group=group, gpus=gpus.get(name, 0),
                              cpus=cpus[i] if i < len(cpus) else 0, address=_node_address(name)))
    return nodes


def _gpus_per_node(job_id: str) -> dict[str, int]:
    """GPUs the job holds on each node, from ``scontrol show job -d`` (``GRES=gpu:2(IDX:0-1)``)."""
    text = run_slurm(["scontrol", "show", "job", "-d", job_id]).stdout
    gpus: dict[str, int] = {}
    for match in re.finditer(r"Nodes=(\S+)\s.*?GRES=(\S*)", text):
        count = sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:(,]+)?:(\d+)", match.group(2)))
        for name in expand_hostlist(match.group(1)):
            gpus[name] = count
    return gpus


def _node_address(name: str) -> str:
    return parse_key_values(run_slurm(["scontrol", "show", "node", name]).stdout).get("NodeAddr", name)


def srun_argv(spec: StepSpec, *, het_group: int | None) -> list[str]:
    """``srun`` for one role step: exact resources, explicit nodes, one task per node."""
    argv = ["srun", "--exact", f"--nodes={len(spec.nodes)}", f"--ntasks={len(spec.nodes)}",
            "--ntasks-per-node=1", f"--cpus-per-task={spec.cpus_per_node}", f"--nodelist={','.join(spec.nodes)}",
            f"--job-name={spec.name}", "--kill-on-bad-exit=1"]
    if het_group is not None:
        argv.insert(1, f"--het-group={het_group}")
    if spec.gpus_per_node:
        argv.append(f"--gres=gpu:{spec.gpus_per_node}")
    return [*argv, *spec.command]


class SlurmCluster(Cluster):
    backend = "slurm"

    def __init__(self, env: Mapping[str, str] | None = None):
        self._env = dict(os.environ if env is None else env)
        self._hetjob = int(self._env.get("SLURM_HET_SIZE", "1")) > 1
        self._steps = ProcessSteps()
        self._count = 0

    def discover(self) -> Sequence[Node]:
        return discover_allocation(self._env)

    def start_step(self, spec: StepSpec) -> str:
        self._count += 1
        step_id = f"{self._count}-{spec.name}"
        argv = srun_argv(spec, het_group=WORKER_GROUP if self._hetjob else None)
        env = {"GYRECTL_STEP_NODES": ",".join(spec.nodes), **spec.env}
        self._steps.start(step_id, argv, env=env, log_path=spec.log_path)
        return step_id

    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        self._steps.stop(step_id, grace_s=grace_s)  # srun forwards SIGTERM to every task of the step

    def step_status(self, step_id: str) -> StepStatus:
        return self._steps.status(step_id)

    def close(self) -> None:
        self._steps.stop_all(grace_s=5.0)
