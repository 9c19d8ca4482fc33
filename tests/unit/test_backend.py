"""The one place that picks a backend, and what each says about its nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gyrectl.cluster.backend import backend_for, backend_named, read_job_record
from gyrectl.cluster.local.cluster import LocalCluster
from gyrectl.config import parse_config
from gyrectl.run.rundir import DamagedRunFile, RunDir


def test_the_config_picks_the_backend_and_the_slurm_layout() -> None:
    local = backend_for(parse_config({}))
    cells = backend_for(parse_config({"cluster": {"backend": "slurm"}}))
    hetjob = backend_for(parse_config({"cluster": {"backend": "slurm", "layout": "hetjob"}}))
    assert (local.name, cells.name, hetjob.name) == ("local", "slurm", "slurm")
    assert cells.layout.cell_jobs and not hetjob.layout.cell_jobs  # type: ignore[attr-defined]
    assert backend_named("k8s") is None


def test_node_facts_of_each_backend() -> None:
    local, slurm = backend_named("local"), backend_named("slurm", layout="cells")
    assert local is not None and slurm is not None
    assert (local.server_port(8000, cell=3), slurm.server_port(8000, cell=3)) == (8003, 8000)
    assert slurm.server_port(8000, cell=3, slot=2) == 8002  # a node's third GPU group
    assert (local.rendezvous_host("node7"), slurm.rendezvous_host("node7")) == ("127.0.0.1", "node7")
    assert local.server_host_args() == ("--host", "127.0.0.1") and slurm.server_host_args() == ()
    assert local.bind(("vllm",), python="py") == ("vllm",)
    assert slurm.bind(("vllm",), python="py") == ("py", "-m", "gyrectl.cluster.slurm.bind", "vllm")
    assert isinstance(local.cluster(parse_config({}), RunDir(Path("/nonexistent"))), LocalCluster)


@pytest.mark.parametrize("record,problem", [({"job_id": "1", "backend": "k8s"}, "unknown backend 'k8s'"),
                                            ({"job_id": "local-x", "backend": "local"}, "is not local-PID")])
def test_a_job_record_no_backend_wrote_is_damaged(tmp_path: Path, record: dict[str, str], problem: str) -> None:
    run = RunDir.create(tmp_path, "r")
    run.write_json(run.job_file, record)
    with pytest.raises(DamagedRunFile, match=problem):
        read_job_record(run)
    run.write_json(run.job_file, {"job_id": "123", "backend": "slurm", "layout": "hetjob"})
    assert read_job_record(run) == {"job_id": "123", "backend": "slurm", "layout": "hetjob"}
