"""The whole RL loop on the real test cluster: the head (coordinator, gateway, harnesses) on
component 0, vLLM servers and torchrun training as srun steps on the worker nodes, cell 1 moving
between them each step (configs/slurm-tiny.yaml: on-policy, so cell 1 serves while there is
nothing to train). One run serves every assertion; it takes a few minutes."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gyrectl.config import load_config
from gyrectl.coordinator.events import PhaseChanged, StepFailed, TrainEnded, TrainStarted
from gyrectl.coordinator.state import Phase

from batch_groups import assert_whole_groups
from runs import batches, events, execution_records, launch_loop, status, wait_for, wait_until_ended

pytestmark = [pytest.mark.usefixtures("slurm_cluster"), pytest.mark.vllm, pytest.mark.loop, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
CONFIG = load_config(REPO / "configs/slurm-tiny.yaml")


@pytest.fixture(scope="module")
def launched(cli, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return launch_loop(cli, root=tmp_path_factory.mktemp("runs"), model=tiny_model_dir, name="elastic")


@pytest.fixture(scope="module")
def probed(cli, launched: Path) -> dict[str, int]:
    """What a live rollout server of the run answers, asked from outside its node (the login node):
    routes without a key, with the harnesses' token, and with the run's server key."""
    url = wait_for(lambda: next((s["url"] for s in status(cli, launched).get("servers") or ()
                                 if s["running"] is not None), None),  # its metrics were read: the head has the key
                   timeout=600, what="a serving rollout server", every=1.0)
    refused = {"none": None, "client": (launched / "token").read_text().strip()}
    answers = {f"{route} {who}": _answer(url + route, key)  # the control routes only where refused: harmless
               for route in ("/v1/models", "/pause?mode=abort", "/collective_rpc", "/health")
               for who, key in refused.items()}
    return answers | {"/v1/models server": _answer(url + "/v1/models", (launched / "server_key").read_text().strip())}


@pytest.fixture(scope="module")
def finished(cli, launched: Path, probed: dict[str, int]) -> tuple[Path, dict]:
    return launched, wait_until_ended(cli, launched, timeout=900)


def _answer(url: str, key: str | None) -> int:
    method = "GET" if url.endswith(("/health", "/v1/models")) else "POST"
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    body = b'{"method": "no_such_method"}' if method == "POST" else None  # refused before it could act
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method=method, headers=headers),
                                    timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_rollout_server_answers_only_with_the_runs_server_key(probed) -> None:
    for route in ("/v1/models", "/pause?mode=abort", "/collective_rpc"):
        assert probed[f"{route} none"] == 401 and probed[f"{route} client"] == 401, probed
    assert probed["/v1/models server"] == 200, probed
    assert probed["/health none"] == 200, probed  # liveness probes need no secret


def test_run_completes_its_steps_on_slurm(finished) -> None:
    run_dir, view = finished
    assert (view["job"]["state"], view["job"]["reason"], view["job"]["backend"]) == ("ended", "completed", "slurm"), \
        view["job"]
    assert [s["step"] for s in view["steps"]] == list(range(CONFIG.run.steps))
    assert CONFIG.run.steps >= 3
    trained = [e for e in events(run_dir) if isinstance(e, TrainEnded)]
    assert [e.index for e in trained] == list(range(CONFIG.run.steps))


def test_cells_move_both_ways_in_the_journal_and_in_status(finished) -> None:
    run_dir, view = finished
    phases = [(e.cell, e.phase) for e in events(run_dir) if isinstance(e, PhaseChanged)]
    assert (1, Phase.DRAINING) in phases and (1, Phase.RETURNING) in phases
    assert (0, Phase.DRAINING) not in phases, "cell 0 is the standalone rollout pool (min_rollout_cells: 1)"
    servers = {e.step_id for e in events(run_dir) if isinstance(e, PhaseChanged) and e.cell == 1 and e.step_id}
    assert len(servers) == 1, f"cell 1 sleeps and wakes one server step: {servers}"
    moves = view["moves"]
    assert all(set(m) >= {"cell", "from", "to", "at", "duration_s"} for m in moves)
    done = {(m["cell"], m["from"], m["to"]) for m in moves if m["duration_s"] is not None}
    assert {(1, "rollout", "train"), (1, "train", "rollout")} <= done, moves
    workers = [n["name"] for n in view["nodes"] if n["het_group"] == 1]
    cells = view["cells"]
    assert [(c["id"], c["nodes"]) for c in cells] == [(0, [workers[0]]), (1, [workers[1]])]
    assert all(set(c) >= {"id", "nodes", "role", "phase", "since", "weight_version"} for c in cells)
    assert cells[0]["role"] == "rollout" and cells[0]["weight_version"] >= 1


def test_training_ran_as_torchrun_steps_on_the_train_cell(finished) -> None:
    run_dir, view = finished
    started = [e for e in events(run_dir) if isinstance(e, TrainStarted)]
    assert all(e.cells == (1,) for e in started)
    # one resident torchrun member trains every step: it waits beside the woken server (srun --overlap)
    assert [e.reused for e in started] == [False] + [True] * (CONFIG.run.steps - 1)
    assert [s["trainer"] for s in view["steps"]] == ["started"] + ["reused"] * (CONFIG.run.steps - 1)
    assert (run_dir / "logs" / "train-step0-cell1.log").exists()  # srun's own log of the member step
    assert all(s["world_size"] == 1 and s["executions"] == CONFIG.training.batch_executions for s in view["steps"])


def test_no_execution_lost_or_trained_twice(finished) -> None:
    run_dir, view = finished
    records = execution_records(run_dir)
    assert all(r["status"] == "ok" and r["exit_code"] == 0 and not r["error"] for r in records), \
        [r for r in records if r["status"] != "ok" or r["exit_code"] != 0]
    trained = [e for step in batches(run_dir).values() for e in step]
    assert len(trained) == len(set(trained)) == CONFIG.run.steps * CONFIG.training.batch_executions
    assert set(trained) <= {r["execution"] for r in records}
    assert view["executions"]["trained"] == len(trained)
    assert assert_whole_groups(run_dir, group_size=CONFIG.rollout.executions_per_task) == \
        len(trained) // CONFIG.rollout.executions_per_task
    assert not [e for e in events(run_dir) if isinstance(e, StepFailed)], "a clean run has no failed step"


def test_status_shows_the_servers_load_the_head_published(finished) -> None:
    _, view = finished
    servers = {s["name"]: s for s in view["servers"]}
    assert "cell0" in servers and view["servers_at"]
    assert set(servers["cell0"]) >= {"state", "gateway_calls", "running", "waiting", "weight_version"}
