"""The Slurm backend of the ``hetjob`` layout, used from inside the heterogeneous allocation (on
the head component); ``cells.py`` extends it for the ``cells`` layout.

Discovery reads the allocation from the environment Slurm gives the batch script
(``SLURM_JOB_NODELIST_HET_GROUP_<k>``, ``SLURM_JOB_CPUS_PER_NODE_HET_GROUP_<k>``) and asks
``scontrol`` for hostnames, node addresses and GPUs. A step is ``srun --het-group=1 --exact``
pinned to explicit nodes, so several role steps share the allocation without blocking each other.

A step is stopped through Slurm (``scancel -s TERM JOB.STEP``, then ``scancel JOB.STEP``), never by
signalling its ``srun`` alone: an ``srun`` killed while its tasks run leaves them running on the
node, holding the CPUs the next role's step waits for. Each ``srun`` is named after its step id so
``squeue -s`` finds its Slurm step.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence

from gyrectl.cluster.base import Cluster, Node, StepSpec, StepStatus
from gyrectl.cluster.keeper import keeper_argv
from gyrectl.cluster.processes import ProcessSteps
from gyrectl.cluster.slurm.cli import expand_hostlist, gres_gpus, job_steps, parse_cpus_per_node, run_slurm, show_node
from gyrectl.cluster.slurm.templates import render_template
from gyrectl.errors import RuntimeFailure

WORKER_GROUP = 1
EXIT_WAIT_S = 15.0
"""How long ``srun`` may take to exit once its step is cancelled before it is killed itself."""


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
                              cpus=cpus[i] if i < len(cpus) else 0, address=node_address(name)))
    return nodes


def _gpus_per_node(job_id: str) -> dict[str, int]:
    """GPUs the job holds on each node, from ``scontrol show job -d`` (``GRES=gpu:2(IDX:0-1)``)."""
    text = run_slurm(["scontrol", "show", "job", "-d", job_id]).stdout
    gpus: dict[str, int] = {}
    for match in re.finditer(r"Nodes=(\S+)\s.*?GRES=(\S*)", text):
        for name in expand_hostlist(match.group(1)):
            gpus[name] = gres_gpus(match.group(2))
    return gpus


def node_address(name: str, node: Mapping[str, str] | None = None) -> str:
    """Where other nodes reach ``name``, from its :func:`show_node` record (read when not given)."""
    return (node if node is not None else show_node(name)).get("NodeAddr", name)


def srun_argv(spec: StepSpec, *, target: str, step_name: str | None = None) -> list[str]:
    """``srun`` for one role step (``slurm_templates/step.srun``): exact resources, explicit
    nodes, ``tasks_per_node`` tasks on each (sharing the node's CPUs), then the step's command.
    ``target`` says which job's allocation the step goes into (``--het-group=1``, ``--jobid=J``,
    or empty for the job srun runs in). Each task runs under a step keeper
    (:mod:`gyrectl.cluster.keeper`): with ``proctrack/linuxproc`` Slurm finds a step's processes
    by their parents, so one whose parent died (vLLM's engine core, torchrun's workers) would
    escape the step's end; below a keeper none does."""
    text = render_template(
        "step.srun", target=target, num_nodes=str(len(spec.nodes)),
        num_tasks=str(len(spec.nodes) * spec.tasks_per_node), tasks_per_node=str(spec.tasks_per_node),
        cpus_per_task=str(max(spec.cpus_per_node // spec.tasks_per_node, 1)),
        gres=f"--gres=gpu:{spec.gpus_per_node}" if spec.gpus_per_node else "",
        overlap="--overlap" if spec.overlap else "",
        nodelist=shlex.quote(",".join(spec.nodes)), step_name=shlex.quote(step_name or spec.name))
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [*shlex.split(" ".join(lines)), *keeper_argv(spec.command)]


def _own_allocation(name: str) -> bool:
    """The head job's description of its own allocation (``SLURM_JOB_ID``, ``SLURM_NNODES``,
    ``SLURM_JOB_NODELIST``, ...): srun reads it as the allocation it runs in, so a step for another
    job (``--jobid``: a cell's) must not inherit it -- with a 1-node head and a 2-node cell, srun
    answered "Only allocated 1 nodes asked for 2". ``SLURM_CONF`` (where the cluster is) stays."""
    return name.startswith("SLURM_") and name != "SLURM_CONF"


class SlurmCluster(Cluster):
    """Steps inside the allocation the head runs in (the ``hetjob`` layout: component 1)."""

    backend = "slurm"

    def __init__(self, env: Mapping[str, str] | None = None):
        self._env = dict(os.environ if env is None else env)
        self._hetjob = int(self._env.get("SLURM_HET_SIZE", "1")) > 1
        self._steps = ProcessSteps()
        self._job_of: dict[str, str] = {}
        """The Slurm job each step runs in (a het component has a job id of its own)."""
        self._count = 0

    def discover(self) -> Sequence[Node]:
        return discover_allocation(self._env)

    def _target(self, nodes: Sequence[str]) -> tuple[str, str]:
        """(srun's option naming the allocation, that allocation's job id) for a step on ``nodes``."""
        if self._hetjob:
            return f"--het-group={WORKER_GROUP}", self._env.get(f"SLURM_JOB_ID_HET_GROUP_{WORKER_GROUP}", "")
        return "", self._env.get("SLURM_JOB_ID", "")

    def start_step(self, spec: StepSpec) -> str:
        self._count += 1
        step_id = f"{self._count}-{spec.name}"
        target, self._job_of[step_id] = self._target(spec.nodes)
        argv = srun_argv(spec, target=target, step_name=step_id)
        env = {"GYRECTL_STEP_NODES": ",".join(spec.nodes), **spec.env}
        self._steps.start(step_id, argv, env=env, log_path=spec.log_path,
                          unset=_own_allocation if target.startswith("--jobid=") else lambda name: False)
        return step_id

    def slurm_step(self, step_id: str) -> str | None:
        """Slurm's ``JOB.STEP`` of a running step; None while its srun still waits for resources."""
        return job_steps(self._job_of[step_id]).get(step_id)

    def stop_step(self, step_id: str, *, grace_s: float = 5.0) -> None:
        if self._steps.status(step_id).state.ended:
            return
        slurm_id = self.slurm_step(step_id)
        if slurm_id is None:  # nothing runs on the nodes yet: stopping srun withdraws the request
            self._steps.stop(step_id, grace_s=0.0)
            if (late := self.slurm_step(step_id)) is not None:  # created while srun was being stopped
                run_slurm(["scancel", late], check=False)
            return
        if grace_s > 0:
            # On a het component scancel -s answers "Invalid job id" (exit 225) although the signal
            # is delivered: the step's own exit is the answer that counts.
            run_slurm(["scancel", "-s", "TERM", slurm_id], check=False, retries=1)
            if self._steps.await_cancel(step_id, grace_s):
                return
        run_slurm(["scancel", slurm_id], check=False)
        if not self._steps.await_cancel(step_id, EXIT_WAIT_S):
            self._steps.stop(step_id, grace_s=0.0)

    def step_status(self, step_id: str) -> StepStatus:
        return self._steps.status(step_id)

    def close(self) -> None:
        for step_id in self._steps.running():
            self.stop_step(step_id, grace_s=0.0)  # the head is going: Slurm's KillWait leaves no time to be gentle
