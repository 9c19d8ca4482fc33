"""The key sets of ``gyrectl status RUN --json``, at every level and in order: a machine-readable
contract that scripts rely on, pinned on a run directory that fills every part of the view (a
head that ended, nodes, servers, cells with a lost and re-placed one, moves, a training step under
way, finished steps, a fault and its recovery)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gyrectl.config import dump_config, load_config
from gyrectl.coordinator.events import (
    CellLost,
    CellPlaced,
    Dispatched,
    Finished,
    PhaseChanged,
    TrainEnded,
    TrainStarted,
)
from gyrectl.coordinator.journal import Journal
from gyrectl.coordinator.state import Phase
from gyrectl.run.rundir import RunDir

T0 = 1_796_000_000.0
STEP = {"step": 0, "reward_mean": 0.5, "executions": 4, "naive_tokens": 100, "trained_tokens": 40,
        "weight_version": 1, "duration_s": 2.5, "loss": 0.25}  # a trainer's own extra field is kept
NODE = {"name": "n0", "het_group": 1, "gpus": 0, "cpus": 1, "role": "rollout", "address": "10.0.0.1"}
SERVER = {"name": "cell0", "url": "http://10.0.0.1:18300", "state": "serving", "gateway_calls": 3, "running": 2,
          "waiting": None, "weight_version": 1}
EVENTS = (PhaseChanged(cell=0, phase=Phase.STARTING, at=T0, step_id="s0"),
          PhaseChanged(cell=1, phase=Phase.STARTING, at=T0, step_id="s1"),
          PhaseChanged(cell=0, phase=Phase.ROLLOUT, at=T0 + 30, step_id="s0", weight_version=0),
          PhaseChanged(cell=1, phase=Phase.ROLLOUT, at=T0 + 31, step_id="s1", weight_version=0),
          Dispatched(count=8, version=0, at=T0 + 31),  # one whole group of the config's 8
          *(Finished(seq=i, version=0, timed_out=False, at=T0 + 40, infra_failure=i == 3) for i in range(8)),
          PhaseChanged(cell=1, phase=Phase.DRAINING, at=T0 + 50, step_id="s1"),
          PhaseChanged(cell=1, phase=Phase.TRAIN, at=T0 + 51),
          TrainStarted(index=0, cells=(1,), take=((0, 0, 8),), at=T0 + 52, step_ids=("t0",), left_out=1),
          TrainEnded(index=0, at=T0 + 60),
          PhaseChanged(cell=1, phase=Phase.RETURNING, at=T0 + 61, step_id="s2"),
          CellLost(cell=1, at=T0 + 62, nodes=("n1",)), CellPlaced(cell=1, nodes=("n2",), at=T0 + 70),
          PhaseChanged(cell=1, phase=Phase.TRAIN, at=T0 + 71),
          TrainStarted(index=1, cells=(1,), take=(), at=T0 + 72, step_ids=("t1",)),
          PhaseChanged(cell=0, phase=Phase.DRAINING, at=T0 + 73, step_id="s0"))  # a move under way


EVAL = {"step": 3, "weight_version": 4, "tasks": 2, "executions": 4, "infra_failures": 1, "reward_mean": 0.5,
        "pass_at_1": 0.25, "pass_at_k": 0.5, "k": 2, "at": T0 + 70}


def _full_run(tmp_path: Path) -> RunDir:
    run = RunDir.create(tmp_path, "keys")
    run.config_file.write_text(dump_config(load_config("configs/local-tiny.yaml")))
    # A live pid that is not this run's head: the job reads as ended, with the head's own reason.
    run.write_json(run.job_file, {"job_id": f"local-{os.getpid()}", "backend": "local", "layout": None,
                                  "submitted_at": T0, "previous_jobs": []})
    run.write_json(run.nodes_file, [NODE, {**NODE, "name": "n1", "role": "train", "address": None}])
    run.write_json(run.servers_file, {"at": T0 + 65, "servers": [SERVER]})
    with Journal(run.journal_file) as journal:
        for event in EVENTS:
            journal.append(event)
    with run.journal_file.open("a") as f:
        f.write(json.dumps({"event": "head_ended", "at": T0 + 80, "reason": "stopped", "error": ""}) + "\n")
    run.metrics_file.write_text(json.dumps(STEP) + "\n")
    run.evals_file.write_text(json.dumps(EVAL) + "\n" + json.dumps({"weight_version": "garbled"}) + "\n")
    return run


def test_status_json_keys_at_every_level(cli, tmp_path: Path) -> None:
    result = cli("status", str(_full_run(tmp_path).path), "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert list(view) == ["run_dir", "name", "job", "nodes", "note", "steps", "total_steps", "cells", "moves",
                          "executions", "training", "servers", "servers_at", "damaged", "skipped", "records_read",
                          "evals", "disk_bytes", "faults"]
    assert list(view["job"]) == ["id", "backend", "state", "slurm_state", "reason", "components", "error"]
    assert [sorted(n) for n in view["nodes"]] == [sorted(NODE)] * 2
    assert [list(s) for s in view["steps"]] == [list(STEP)]
    assert [list(c) for c in view["cells"]] == [
        ["id", "nodes", "role", "phase", "since", "weight_version", "in_training_step", "engine"]] * 2
    assert [list(m) for m in view["moves"]] == [["cell", "from", "to", "at", "duration_s", "warm", "ready_s"]] * 3
    assert list(view["executions"]) == ["dispatched", "in_flight", "finished", "trained", "infra_failures",
                                       "uniform_skipped"]
    assert list(view["training"]) == ["index", "cells", "executions", "started_at"]
    assert [sorted(s) for s in view["servers"]] == [sorted(SERVER)]
    assert [list(e) for e in view["evals"]] == [list(EVAL)]
    assert view["damaged"] == {} and [s["file"].endswith("evals.jsonl") for s in view["skipped"]] == [True]
    assert list(view["records_read"]) == ["journal.jsonl", "metrics.jsonl"]
    assert [list(f) for f in view["faults"]] == [["at", "cell", "kind", "recovery", "seconds"]]


def test_status_json_values_of_the_coordinator_rows(cli, tmp_path: Path) -> None:
    view = json.loads(cli("status", str(_full_run(tmp_path).path), "--json").stdout)
    assert view["job"] == {"id": f"local-{os.getpid()}", "backend": "local", "state": "ended", "slurm_state": "",
                           "reason": "stopped", "components": [], "error": ""}
    assert view["cells"] == [
        {"id": 0, "nodes": ["n0"], "role": "rollout", "phase": "draining", "since": T0 + 73, "weight_version": 0,
         "in_training_step": False, "engine": "awake"},
        {"id": 1, "nodes": ["n2"], "role": "train", "phase": "train", "since": T0 + 71, "weight_version": None,
         "in_training_step": True, "engine": "cold"}]
    assert view["moves"] == [{"cell": 1, "from": "rollout", "to": "train", "at": T0 + 50, "duration_s": 1.0,
                              "warm": False, "ready_s": 1.0},
                             {"cell": 1, "from": "train", "to": "lost", "at": T0 + 61, "duration_s": 1.0,
                              "warm": False, "ready_s": 1.0},
                             {"cell": 0, "from": "rollout", "to": "train", "at": T0 + 73, "duration_s": None,
                              "warm": False, "ready_s": None}]
    assert view["training"] == {"index": 1, "cells": [1], "executions": 0, "started_at": T0 + 72}
    # the lost cell is back in use (training) once placed
    assert view["faults"] == [{"at": T0 + 62, "cell": 1, "kind": "cell_lost", "recovery": "placed", "seconds": 9.0}]
    # the infrastructure failure was taken by step 0 but left out of its batch: never trained
    assert view["executions"] == {"dispatched": 8, "in_flight": 0, "finished": 8, "trained": 7, "infra_failures": 1,
                                 "uniform_skipped": 0}
    assert (view["steps"], view["servers"], view["servers_at"]) == ([STEP], [SERVER], T0 + 65)
    assert view["records_read"] == {"journal.jsonl": len(EVENTS) + 1, "metrics.jsonl": 1}


def test_status_disk_bytes_counts_the_run_directory_not_the_model_behind_v0(cli, tmp_path: Path) -> None:
    run = _full_run(tmp_path)
    before = json.loads(cli("status", str(run.path), "--json").stdout)["disk_bytes"]
    assert before == sum(p.stat().st_size for p in run.path.rglob("*") if p.is_file())
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 50_000)
    run.weights_dir(0).symlink_to(model)  # as the head links it: the user's model, not the run's
    run.weights_dir(1).mkdir()
    (run.weights_dir(1) / "model.safetensors").write_bytes(b"\1" * 1_234_000)
    view = json.loads(cli("status", str(run.path), "--json").stdout)
    assert view["disk_bytes"] == before + 1_234_000
    text = cli("status", str(run.path))
    assert text.returncode == 0 and f"({(before + 1_234_000) / 1e6:.1f} MB on disk)" in " ".join(text.stdout.split())


def test_status_json_before_any_coordinator_event(cli, tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "new")
    run.config_file.write_text(dump_config(load_config("configs/local-tiny.yaml")))
    view = json.loads(cli("status", str(run.path), "--json").stdout)
    assert {key: view[key] for key in ("nodes", "steps", "cells", "moves", "executions", "training", "servers",
                                       "faults")} == {
        "nodes": [], "steps": [], "cells": [], "moves": [], "executions": {}, "training": None, "servers": [],
        "faults": []}


def test_status_text_says_how_many_eval_executions_never_ran(cli, tmp_path: Path) -> None:
    """The issue's case: an evaluation's pass rates beside its infrastructure failures (a line
    of a head from before they were counted shows none)."""
    run = RunDir.create(tmp_path, "evals")
    run.config_file.write_text(dump_config(load_config("configs/local-tiny.yaml")))
    older = {key: value for key, value in EVAL.items() if key != "infra_failures"}
    run.evals_file.write_text("".join(json.dumps(line) + "\n" for line in ({**EVAL, "weight_version": 0}, older)))
    text = cli("status", str(run.path), env={"COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    rows = [line.split() for line in text.stdout.splitlines() if line.strip(" │|").startswith("v")]
    cells = [[c for c in row if c not in "│|┃"] for row in rows]
    assert [c[:6] for c in cells if c[1] == "4"] == [["v0", "4", "1", "0.500", "0.250", "0.500"],
                                                     ["v4", "4", "-", "0.500", "0.250", "0.500"]]
