"""The srun line of a role step, rendered from slurm_templates/step.srun."""

from __future__ import annotations

import sys

from gyrectl.cluster.base import StepSpec
from gyrectl.cluster.slurm.hetjob import srun_argv


def test_a_het_component_step_is_exact_pinned_and_named() -> None:
    spec = StepSpec(name="rollout-cell0", nodes=("node2", "node3"), command=("python", "-m", "x", "a b"),
                    cpus_per_node=4, gpus_per_node=2)
    assert srun_argv(spec, target="--het-group=1", step_name="7-rollout-cell0") == [
        "srun", "--het-group=1", "--exact", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=4",
        "--gres=gpu:2", "--nodelist=node2,node3", "--job-name=7-rollout-cell0", "--kill-on-bad-exit=1",
        sys.executable, "-m", "gyrectl.cluster.keeper", "--", "python", "-m", "x", "a b"]  # each task under a keeper


def test_a_plain_job_step_without_gpus_has_neither_flag() -> None:
    argv = srun_argv(StepSpec(name="probe", nodes=("n1",), command=("true",)), target="")
    assert not any(a.startswith(("--het-group", "--gres")) for a in argv) and "--job-name=probe" in argv


def test_a_cell_job_step_names_the_cell_job() -> None:
    argv = srun_argv(StepSpec(name="train-step0-cell1", nodes=("node4",), command=("true",)), target="--jobid=812")
    assert argv[:3] == ["srun", "--jobid=812", "--exact"] and "--nodelist=node4" in argv


def test_a_member_beside_a_sleeping_server_overlaps_it() -> None:
    spec = StepSpec(name="train-step0-cell1", nodes=("node4",), command=("true",), overlap=True)
    assert srun_argv(spec, target="--jobid=812")[:4] == ["srun", "--jobid=812", "--overlap", "--exact"]
    assert "--overlap" not in srun_argv(StepSpec(name="rollout-cell1", nodes=("node4",), command=("true",)),
                                        target="--jobid=812")
