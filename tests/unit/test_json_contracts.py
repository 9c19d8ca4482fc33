"""Golden key sets of the ``--json`` outputs scripts rely on (README, "Machine-readable contracts":
extended, never renamed): ``launch`` (local and Slurm), ``replay``, ``simulate`` and ``status`` of
a Slurm run (its job, the head's components and the cells layout's cell jobs). The expected keys
are written out here, in order: a renamed, dropped or reordered key fails the test, and a key
added on purpose is added here too. ``status --json`` of a local run is pinned in
``test_status_json_keys.py``.

Nothing here reaches Slurm or starts a process: the backends' ``submit``, the partition query
and ``scontrol``/``sacct`` are replaced (monkeypatch) at the names the code calls."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gyrectl.capture.record import CallRecord
from gyrectl.capture.store import CaptureWriter, scan
from gyrectl.cli.app import app
from gyrectl.cluster.local.backend import LocalBackend
from gyrectl.cluster.slurm import cli as slurm_cli
from gyrectl.cluster.slurm.backend import SlurmBackend
from gyrectl.cluster.slurm.cli import JobComponent, PartitionNode
from gyrectl.config import dump_config, load_config
from gyrectl.run.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]

# -- the goldens -------------------------------------------------------------------------------
LAUNCH_KEYS = ["run_dir", "job_id", "backend", "layout"]

REPLAY_KEYS = ["totals", "steps", "executions", "skipped", "unrecoverable_calls"]
COUNT_KEYS = ["executions", "calls", "naive_tokens", "unique_tokens", "trained_tokens_exact",
              "computed_tokens_paths", "trained_tokens_paths", "paths", "dedup_ratio"]
REPLAY_STEP_KEYS = ["step", *COUNT_KEYS]
REPLAY_EXECUTION_KEYS = ["execution", "step", "reward", *COUNT_KEYS, "weight_versions"]
SKIPPED_KEYS = ["file", "offset", "bytes", "line", "reason"]

SIMULATE_KEYS = ["policy", "workload", "makespan_s", "executions_trained", "throughput_per_hour",
                 "gpu_idle_fraction", "lower_bound_s", "switches", "steps", "time_per_step_s", "step_times_s",
                 "timed_out", "staleness", "events", "wall_s", "events_per_s"]

STATUS_KEYS = ["run_dir", "name", "job", "nodes", "note", "steps", "total_steps", "cells", "moves", "executions",
               "training", "servers", "servers_at", "damaged", "skipped", "records_read", "evals", "disk_bytes",
               "faults"]
JOB_KEYS = ["id", "backend", "state", "slurm_state", "reason", "components", "error"]
HEAD_COMPONENT_KEYS = ["id", "state", "nodes"]
CELL_JOB_KEYS = ["id", "state", "nodes", "cell"]


def invoke(*argv: str) -> dict[str, Any]:
    """``gyrectl ARGV`` in this process (so monkeypatches apply); its stdout, parsed."""
    result = CliRunner().invoke(app, list(argv))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(autouse=True)
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Slurm command a test did not fake fails it (this machine may have a Slurm cluster)."""
    def refuse(argv, **_: Any):
        raise AssertionError(f"a test reached Slurm: {argv}")
    monkeypatch.setattr(slurm_cli, "run_slurm", refuse)


# -- launch --json -------------------------------------------------------------------------------
@pytest.fixture
def no_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each backend's ``submit`` returns a job id of its own kind and starts nothing; the
    partition holds room for any tiny config."""
    monkeypatch.setattr(LocalBackend, "submit", lambda self, config, run, *, head: "local-4242")
    monkeypatch.setattr(SlurmBackend, "submit", lambda self, config, run, *, head: "4242")
    nodes = [PartitionNode(partition="lab", name=f"n{i}", cpus=64, gpus=8, mem_mb=512_000, default=True)
             for i in range(8)]
    monkeypatch.setattr(slurm_cli, "partition_nodes", lambda: nodes)


@pytest.mark.parametrize("config, layout", [("configs/local-tiny.yaml", "cells"),
                                            ("configs/slurm-tiny.yaml", "cells"),
                                            ("configs/slurm-tiny.yaml", "hetjob")])
def test_launch_json_keys(no_submit, tmp_path: Path, config: str, layout: str) -> None:
    launched = invoke("launch", str(REPO / config), "--json", "--set", f"run.output_root={tmp_path}",
                      "--set", f"cluster.layout={layout}", "--set", "rollout.harness_command=[]")
    assert list(launched) == LAUNCH_KEYS
    backend = load_config(REPO / config).cluster.backend
    assert (launched["backend"], launched["layout"]) == (backend, layout)
    assert launched["job_id"] == ("local-4242" if backend == "local" else "4242")
    job = json.loads((Path(launched["run_dir"]) / "job.json").read_text())
    assert sorted(job) == ["backend", "job_id", "layout", "submitted_at"]  # written with sorted keys


def test_launch_resume_json_keys_are_launchs(no_submit, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # resume asks Slurm whether the first job still runs: it was cancelled, and Slurm forgot it
    monkeypatch.setattr(slurm_cli, "show_job", lambda job_id: None)
    monkeypatch.setattr(slurm_cli, "completed_state", lambda job_id: "CANCELLED")
    config = ("launch", str(REPO / "configs/slurm-tiny.yaml"), "--json", "--set", f"run.output_root={tmp_path}",
              "--set", "rollout.harness_command=[]")
    run_dir = Path(invoke(*config)["run_dir"])
    resumed = invoke("launch", "--resume", str(run_dir), "--json")
    assert list(resumed) == LAUNCH_KEYS and resumed["run_dir"] == str(run_dir)
    job = json.loads((run_dir / "job.json").read_text())
    assert sorted(job) == ["backend", "job_id", "layout", "previous_jobs", "submitted_at"]


# -- replay --json ---------------------------------------------------------------------------------
CALLS = [
    {"execution": "a", "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4, 5], "weight_version": 0},
    {"execution": "a", "prompt_token_ids": [1, 2, 3, 4, 5, 6], "completion_token_ids": [7], "weight_version": 1},
    {"execution": "b", "prompt_token_ids": [9], "completion_token_ids": [10, 11], "logprobs": [-0.5, -1.0]},
    {"execution": "c", "prompt_token_ids": [12], "completion_token_ids": [13]},
]


def test_replay_json_keys_at_every_level(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = run / "trajectories" / "calls.seg"
    with CaptureWriter(store, fsync=False) as writer:
        for obj in CALLS:
            writer.append(CallRecord.from_json(obj))
    (run / "trajectories" / "executions.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in ({"execution": "b", "step": 2, "reward": 1.0},
                                                {"execution": "c", "step": 3, "reward": 0.0})))
    offsets = [r.offset for r in scan(store).records]
    data = bytearray(store.read_bytes())
    data[offsets[0] + 30] ^= 0x01  # a's first call, which a's second call extends: a is unrecoverable
    store.write_bytes(bytes(data))

    report = invoke("replay", str(run), "--json")
    assert list(report) == REPLAY_KEYS
    assert list(report["totals"]) == COUNT_KEYS
    assert [list(s) for s in report["steps"]] == [REPLAY_STEP_KEYS] * 2
    assert [list(e) for e in report["executions"]] == [REPLAY_EXECUTION_KEYS] * 2
    assert [list(s) for s in report["skipped"]] == [SKIPPED_KEYS]
    assert report["unrecoverable_calls"] == {"a": 1}  # keyed by execution id


# -- simulate --json -------------------------------------------------------------------------------
def test_simulate_json_keys_at_every_level() -> None:
    result = invoke("simulate", str(REPO / "configs/sim-32nodes.yaml"), "--workload", "short-tail",
                    "--set", "run.steps=2", "--json")
    assert list(result) == SIMULATE_KEYS
    assert len(result["step_times_s"]) == 2 and all(isinstance(s, float) for s in result["step_times_s"])
    # staleness: a histogram, {"<steps behind>": executions}, its keys the staleness values
    assert result["staleness"] and all(k.isdigit() and isinstance(v, int) for k, v in result["staleness"].items())
    scalars = [k for k in SIMULATE_KEYS if k not in ("step_times_s", "staleness")]
    assert all(isinstance(result[k], (int, float, str)) for k in scalars)


# -- status --json of a Slurm run ----------------------------------------------------------------
T0 = 1_796_000_000.0


def _slurm_run(tmp_path: Path, layout: str) -> RunDir:
    run = RunDir.create(tmp_path, f"slurm-{layout}")
    config = load_config(REPO / "configs/slurm-tiny.yaml", [f"cluster.layout={layout}"])
    run.config_file.write_text(dump_config(config))
    run.write_json(run.job_file, {"job_id": "100", "backend": "slurm", "layout": layout, "submitted_at": T0})
    if layout == "cells":
        run.write_json(run.cells_file, [{"cell": 0, "job_id": "101", "replacement_job_id": None},
                                        {"cell": 1, "job_id": "102", "replacement_job_id": "103"}])
    return run


def _fake_slurm(monkeypatch: pytest.MonkeyPatch, jobs: dict[str, list[JobComponent]]) -> None:
    monkeypatch.setattr(slurm_cli, "show_job", lambda job_id: jobs.get(str(job_id)))
    monkeypatch.setattr(slurm_cli, "show_jobs", lambda ids: {i: jobs[i][0] for i in ids if i in jobs})
    monkeypatch.setattr(slurm_cli, "completed_state", lambda job_id: "COMPLETED")


def _running(job_id: str, nodes: str) -> list[JobComponent]:
    return [JobComponent(job_id=job_id, state="RUNNING", reason="None", nodes=nodes)]


def test_status_json_keys_of_a_slurm_cells_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = _slurm_run(tmp_path, "cells")
    _fake_slurm(monkeypatch, {"100": _running("100", "n0"), "101": _running("101", "n1"),
                              "102": [JobComponent(job_id="102", state="FAILED", reason="NodeFail", nodes="n2")],
                              "103": [JobComponent(job_id="103", state="PENDING", reason="Resources", nodes="")]})
    view = invoke("status", str(run.path), "--json")
    assert list(view) == STATUS_KEYS
    assert list(view["job"]) == JOB_KEYS
    components = view["job"]["components"]
    assert [list(c) for c in components] == [HEAD_COMPONENT_KEYS] + [CELL_JOB_KEYS] * 3
    assert [(c["id"], c.get("cell")) for c in components] == [("100", None), ("101", 0), ("102", 1), ("103", 1)]
    # no nodes.json yet: the head waits for its cells, and says for which
    assert (view["job"]["state"], view["job"]["reason"]) == ("pending", "cell jobs waiting for nodes (Resources)")


def test_status_json_keys_of_a_slurm_hetjob_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = _slurm_run(tmp_path, "hetjob")
    _fake_slurm(monkeypatch, {"100": [JobComponent(job_id="100+0", state="RUNNING", reason="None", nodes="n0"),
                                      JobComponent(job_id="100+1", state="RUNNING", reason="None", nodes="n[1-2]")]})
    view = invoke("status", str(run.path), "--json")
    assert list(view) == STATUS_KEYS
    assert list(view["job"]) == JOB_KEYS
    assert [list(c) for c in view["job"]["components"]] == [HEAD_COMPONENT_KEYS] * 2
    assert (view["job"]["state"], view["job"]["slurm_state"]) == ("running", "RUNNING,RUNNING")


def test_status_json_keys_of_a_slurm_run_slurm_forgot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = _slurm_run(tmp_path, "hetjob")
    _fake_slurm(monkeypatch, {})  # scontrol: invalid job id; sacct's completion log still knows it
    view = invoke("status", str(run.path), "--json")
    assert list(view) == STATUS_KEYS
    assert view["job"] == {"id": "100", "backend": "slurm", "state": "ended", "slurm_state": "COMPLETED",
                           "reason": "completed", "components": [], "error": ""}


def test_launch_dry_run_needs_no_slurm(tmp_path: Path) -> None:
    """``--dry-run`` renders the sbatch script without asking Slurm anything (the autouse
    fixture fails any Slurm call); with ``--json`` the script comes inside an object."""
    argv = ["launch", str(REPO / "configs/slurm-tiny.yaml"), "--dry-run", "--set", f"run.output_root={tmp_path}"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("#!/bin/bash") and not (tmp_path / "slurm-tiny").exists()
    as_json = CliRunner().invoke(app, [*argv, "--json"])
    assert as_json.exit_code == 0, as_json.output
    shown = json.loads(as_json.stdout)
    assert list(shown) == ["dry_run", "run_dir", "backend", "layout", "script"]
    assert shown["script"] == result.stdout and shown["run_dir"] == str(tmp_path / "slurm-tiny")


def test_status_of_a_256_cell_run_asks_slurm_once_for_every_cell_job(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """The cell jobs' states come from one ``squeue`` however many cells (the head's job from one
    ``scontrol``): Slurm's answer, in its own output format, is parsed into every cell's row."""
    run = _slurm_run(tmp_path, "cells")
    run.write_json(run.cells_file, [{"cell": c, "job_id": str(1000 + c), "replacement_job_id": None}
                                    for c in range(256)])
    calls: list[list[str]] = []

    def fake(argv, **_: Any):
        calls.append(list(argv))
        if argv[0] == "scontrol":
            return subprocess.CompletedProcess(argv, 0, "JobId=100 JobState=RUNNING Reason=None NodeList=n0\n", "")
        ids = argv[argv.index("-j") + 1].split(",")
        # the last one forgotten
        lines = [f"{job}|{'RUNNING' if int(job) % 2 else 'NODE_FAIL'}|None|n{job}" for job in ids[:-1]]
        return subprocess.CompletedProcess(argv, 0, "\n".join(lines) + "\n", "")

    monkeypatch.setattr(slurm_cli, "run_slurm", fake)
    view = invoke("status", str(run.path), "--json")
    assert [argv[0] for argv in calls] == ["scontrol", "squeue"]
    cells = [c for c in view["job"]["components"] if "cell" in c]
    assert len(cells) == 256 and cells[1] == {"id": "1001", "state": "RUNNING", "nodes": "n1001", "cell": 1}
    assert cells[0]["state"] == "NODE_FAIL" and cells[255]["state"] == "ENDED"
