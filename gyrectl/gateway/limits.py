"""How many files the gateway may hold open: every call in flight holds two sockets (the
harness's, and the one to its rollout server), so a head serving thousands of sessions needs
more than the usual soft limit of 1,024 open files. The soft limit is raised toward the hard
one; what even the hard limit cannot hold is said, with the numbers, before a call fails."""

from __future__ import annotations

import resource

SOCKETS_PER_SESSION = 2
SPARE = 256
"""Files besides the sessions' sockets: the capture store, logs, the process's own."""


def open_files_for(sessions: int) -> int:
    return sessions * SOCKETS_PER_SESSION + SPARE


def raise_open_files(sessions: int) -> str:
    """Raises this process's soft limit of open files to what ``sessions`` concurrent sessions
    need (at most the hard limit); returns why that is not enough (empty: it is)."""
    wanted = open_files_for(sessions)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return ""
    return (f"{sessions} concurrent sessions need about {wanted} open files in a gateway process (two sockets each), "
            f"but this process may open {soft} (its hard limit): calls beyond that will fail; raise the head "
            f"node's `ulimit -n` (Slurm: the limits slurmd starts jobs with), spread the sessions over more "
            f"cluster.head.gateway_processes, or lower rollout.concurrency_per_server")
