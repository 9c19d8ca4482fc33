"""Slurm's command-line clients, called with retries and turned into plain data.

On a loaded head node (vLLM saturating the CPU) slurmctld answers late, so every read is retried
a few times before it counts as a failure.
"""

from __future__ import annotations

import functools
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gyrectl.errors import RuntimeFailure

RETRIES = 3
TIMEOUT_S = 20.0


def run_slurm(argv: Sequence[str], *, retries: int = RETRIES, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs a Slurm client, retrying on time-outs and controller hiccups."""
    last: subprocess.CompletedProcess[str] | None = None
    for attempt in range(retries):
        try:
            last = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except FileNotFoundError:
            raise RuntimeFailure(f"{argv[0]} not found: is this a Slurm login node (and is Slurm on PATH)?") from None
        except subprocess.TimeoutExpired:
            last = None
        else:
            if last.returncode == 0 or not _transient(last.stderr):
                break
        time.sleep(0.5 * (attempt + 1))
    if last is None:
        raise RuntimeFailure(f"{' '.join(argv)} timed out {retries} times after {TIMEOUT_S:g} s")
    if check and last.returncode != 0:
        raise RuntimeFailure(f"{' '.join(argv)} failed (exit {last.returncode}): "
                             f"{last.stderr.strip() or last.stdout.strip()}")
    return last


def _transient(stderr: str) -> bool:
    return any(s in stderr for s in ("timed out", "Socket timed out", "Unable to contact slurm controller",
                                     "Zero Bytes were transmitted"))


def expand_hostlist(hostlist: str) -> list[str]:
    """``node[2-5]`` -> ``['node2', ..., 'node5']`` (by ``scontrol show hostnames``)."""
    if not hostlist:
        return []
    return run_slurm(["scontrol", "show", "hostnames", hostlist]).stdout.split()


def parse_cpus_per_node(text: str) -> list[int]:
    """Slurm's compressed counts: ``4(x3),2`` -> ``[4, 4, 4, 2]``."""
    counts: list[int] = []
    for part in filter(None, text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ValueError(f"cannot read CPU counts {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def gres_gpus(gres: str) -> int:
    """GPUs in a GRES string: ``gpu:2``, ``gpu:a100:4(IDX:0-3)``, ``gpu:2,shard:8`` -> 2, 4, 2."""
    return sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:(,]+)?:(\d+)", gres))


def parse_key_values(text: str) -> dict[str, str]:
    """``scontrol show ...`` output (``Key=Value`` pairs, values without spaces) -> dict."""
    pairs: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key not in pairs:
            pairs[key] = value
    return pairs


@dataclass(frozen=True)
class JobComponent:
    """One component of a (heterogeneous) job, as ``scontrol show job`` reports it."""

    job_id: str
    """``1234+1`` for a het component, ``1234`` for a plain job."""
    state: str
    """Slurm's JobState (PENDING, RUNNING, CANCELLED, ...)."""
    reason: str
    nodes: str
    """Compressed node list (``node[2-5]``), empty while pending."""


def show_job(job_id: str) -> list[JobComponent] | None:
    """Every component of ``job_id``, or ``None`` once Slurm no longer knows the job."""
    result = run_slurm(["scontrol", "show", "job", "-o", str(job_id)], check=False)
    if result.returncode != 0:
        if "Invalid job id" in result.stderr:
            return None
        raise RuntimeFailure(f"scontrol show job {job_id} failed: {result.stderr.strip()}")
    components = []
    for line in filter(str.strip, result.stdout.splitlines()):
        kv = parse_key_values(line)
        het_offset = kv.get("HetJobOffset")
        job = f"{kv.get('HetJobId', kv['JobId'])}+{het_offset}" if het_offset is not None else kv["JobId"]
        components.append(JobComponent(job_id=job, state=kv.get("JobState", "UNKNOWN"),
                                       reason=kv.get("Reason", ""), nodes=kv.get("NodeList", "")))
    return components


def show_jobs(job_ids: Sequence[str]) -> dict[str, JobComponent]:
    """Plain (not heterogeneous) jobs as Slurm reports them, in one ``squeue`` call however many
    (a run of hundreds of cells asks once); a job Slurm has forgotten is missing."""
    if not job_ids:
        return {}
    out = run_slurm(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%r|%N"], check=False).stdout
    jobs = {}
    for line in out.splitlines():
        fields = line.strip().split("|", 3)
        if len(fields) == 4:
            jobs[fields[0]] = JobComponent(job_id=fields[0], state=fields[1], reason=fields[2], nodes=fields[3])
    return jobs


def completed_state(job_id: str) -> str | None:
    """Final state from the job-completion log (``sacct --completion``), for jobs Slurm has
    already forgotten; ``None`` when that log has nothing either."""
    result = run_slurm(["sacct", "--completion", "-n", "-P", "-o", "JobID,State", "-j", str(job_id)],
                       check=False, retries=1)
    if result.returncode != 0:
        return None
    states = [line.split("|")[1] for line in result.stdout.splitlines() if "|" in line]
    return states[-1] if states else None


def job_steps(job_id: str) -> dict[str, str]:
    """Running steps of ``job_id`` by name: ``{step name: "JOB.STEP"}`` (``squeue -s``)."""
    result = run_slurm(["squeue", "-h", "-s", "-j", str(job_id), "-o", "%i|%j"], check=False)
    steps: dict[str, str] = {}
    for line in result.stdout.splitlines():
        step, _, name = line.strip().partition("|")
        if name and "." in step:
            steps[name] = step
    return steps


@dataclass(frozen=True)
class PartitionNode:
    """One node of a partition, as ``sinfo -N`` reports it."""

    partition: str
    name: str
    cpus: int
    gpus: int
    mem_mb: int
    default: bool
    """Whether ``partition`` is the cluster's default partition."""


def partition_nodes() -> list[PartitionNode]:
    """Every (partition, node) pair of the cluster, whatever the node's state: a node down now may
    be back by the time a job would start."""
    out = run_slurm(["sinfo", "-h", "-N", "-o", "%P|%N|%c|%G|%m"]).stdout
    nodes = []
    for line in filter(None, out.splitlines()):
        partition, name, cpus, gres, mem = line.split("|")
        nodes.append(PartitionNode(partition=partition.rstrip("*"), name=name, cpus=int(cpus.rstrip("+")),
                                   gpus=gres_gpus(gres), mem_mb=int(mem.rstrip("+") or 0),
                                   default=partition.endswith("*")))
    return nodes


def job_states(job_ids: Sequence[str]) -> dict[str, str]:
    """Slurm's state of each job (``squeue -t all``); a job Slurm has forgotten is missing."""
    return {job_id: job.state for job_id, job in show_jobs(job_ids).items()}


def job_nodes(job_id: str) -> list[str]:
    """The nodes a running job holds, in Slurm's order."""
    out = run_slurm(["squeue", "-h", "-j", job_id, "-o", "%N"], check=False).stdout.strip()
    return expand_hostlist(out)


def failed_nodes(names: Sequence[str]) -> set[str]:
    """Of ``names``, the nodes Slurm sees as gone: not responding (``*``), down or failing."""
    if not names:
        return set()
    out = run_slurm(["sinfo", "-h", "-N", "-n", ",".join(names), "-o", "%N|%T"], check=False).stdout
    failed = set()
    for line in out.splitlines():
        name, _, state = line.strip().partition("|")
        if state.endswith("*") or state.startswith(("down", "fail")):
            failed.add(name)
    return failed


def job_end_time(job_id: str) -> float | None:
    """When Slurm will end ``job_id`` (its start plus its time limit, as epoch seconds); None for
    a job without a limit or one Slurm does not know."""
    out = run_slurm(["squeue", "-h", "-j", job_id, "-o", "%e"], check=False).stdout.strip()
    try:
        return time.mktime(time.strptime(out, "%Y-%m-%dT%H:%M:%S"))  # Slurm prints local time
    except ValueError:  # "N/A", "NONE", "Unknown" or nothing
        return None


def show_node(name: str) -> dict[str, str]:
    """``scontrol show node`` of one node, as ``Key=Value`` pairs."""
    return parse_key_values(run_slurm(["scontrol", "show", "node", "-o", name]).stdout)


def slurmd_port(node: Mapping[str, str]) -> int:
    """The port a node's slurmd listens on, from its :func:`show_node` record: the node's own
    ``Port`` (several slurmds on one host) or the cluster's ``SlurmdPort``."""
    port = node.get("Port", "")
    return int(port) if port.isdigit() else _cluster_slurmd_port()


@functools.cache
def _cluster_slurmd_port() -> int:
    config = run_slurm(["scontrol", "show", "config"]).stdout
    match = re.search(r"^SlurmdPort\s*=\s*(\d+)", config, re.MULTILINE)
    return int(match.group(1)) if match else 6818
