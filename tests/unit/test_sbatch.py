"""The sbatch scripts of both Slurm layouts: pinned by golden files, values quoted safely.

Regenerate the golden file after an intended change with:
    GYRECTL_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_sbatch.py
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from gyrectl.cluster.slurm.sbatch import render_for_config
from gyrectl.config import load_config
from tests.conftest import REPO

GOLDEN = Path(__file__).parent / "golden" / "slurm-local.sbatch"
GOLDEN_CELLS = Path(__file__).parent / "golden" / "slurm-local-cells.sbatch"
HETJOB = "cluster.layout=hetjob"


def _render(config_overrides: list[str], run_dir: Path) -> str:
    config = load_config(REPO / "configs/slurm-local.yaml", config_overrides)
    return render_for_config(config, run_dir=run_dir, folder=run_dir / "logs" / "submitit", python="/venv/bin/python")


def test_golden_scripts() -> None:
    extras = ["cluster.extra_sbatch=['--constraint=lab']", "cluster.setup=['module load cuda']"]
    for golden, layout in ((GOLDEN, [HETJOB]), (GOLDEN_CELLS, [])):
        text = _render(extras + layout, Path("/shared/runs/slurm-local"))
        if os.environ.get("GYRECTL_UPDATE_GOLDEN"):
            golden.write_text(text)
        assert text == golden.read_text(), golden


def test_cells_layout_submits_the_head_alone_and_shows_a_cell_job() -> None:
    head, cell = _render([], Path("/r")).split("# ---- submitted by the head")
    assert "hetjob" not in head and "#SBATCH --nodes=1" in head and "#SBATCH --cpus-per-task=2" in head
    assert "#SBATCH --nodes=1" in cell and "#SBATCH --cpus-per-task=4" in cell and "#SBATCH --gpus-per-node=2" in cell
    assert "#SBATCH --no-requeue" in cell  # a crashed cell is replaced by a new job, not requeued
    assert not any(line.startswith("srun") for line in (head + cell).splitlines())


def test_hetjob_separates_components_with_the_configured_resources() -> None:
    lines = _render([HETJOB], Path("/r")).splitlines()
    sep = lines.index("#SBATCH hetjob")
    head, workers = lines[:sep], lines[sep:]
    assert "#SBATCH --nodes=1" in head and "#SBATCH --cpus-per-task=2" in head
    assert "#SBATCH --partition=lab" in head and "#SBATCH --time=00:30:00" in head
    assert "#SBATCH --nodes=4" in workers and "#SBATCH --gpus-per-node=2" in workers
    assert "#SBATCH --partition=lab" in workers and "#SBATCH --cpus-per-task=4" in workers
    # the head function must not run inside srun, or the steps it starts would block
    assert not any(line.startswith("srun") for line in lines)
    # sbatch reads directives only until the first command: every one comes before it
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert all(i < first_command for i, line in enumerate(lines) if line.startswith("#SBATCH"))


def test_paths_with_spaces_and_quotes_are_quoted(tmp_path: Path) -> None:
    run_dir = tmp_path / "my runs" / "it's \"here\""
    text = _render([HETJOB], run_dir)
    export = next(line for line in text.splitlines() if line.startswith("export GYRECTL_RUN_DIR="))
    # the shell reads back exactly the path we meant
    echoed = subprocess.run(["bash", "-c", f"{export}; printf %s \"$GYRECTL_RUN_DIR\""], capture_output=True,
                            text=True, check=True).stdout
    assert echoed == str(run_dir)
    command = text.strip().splitlines()[-1]
    assert shlex.split(command)[-1] == str(run_dir / "logs" / "submitit")
    output = next(line for line in text.splitlines() if line.startswith("#SBATCH --output="))
    assert shlex.split(output.split("=", 1)[1]) == [str(run_dir / "logs" / "submitit" / "%j_0_log.out")]


def test_dry_run_prints_the_script_and_creates_nothing(tmp_path: Path, cli) -> None:
    result = cli("launch", "configs/slurm-local.yaml", "--dry-run", "--set", f"run.output_root={tmp_path}/runs",
                 "--set", HETJOB)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH hetjob" in result.stdout and "#SBATCH --gpus-per-node=2" in result.stdout
    assert not (tmp_path / "runs").exists()


def test_harness_nodes_are_exclusive_cpu_jobs_of_their_own() -> None:
    _, _, harness = _render(["cluster.harnesses.nodes=2", "cluster.harnesses.cpus=16",
                             "cluster.harnesses.partition=cpu", "cluster.harnesses.mem_gb=64"],
                            Path("/r")).split("# ---- submitted by the head")
    assert "one per harness node" in harness and "#SBATCH --job-name=gyrectl-slurm-local-harness0" in harness
    for line in ("--exclusive", "--no-requeue", "--nodes=1", "--cpus-per-task=16", "--partition=cpu", "--mem=64GB"):
        assert f"#SBATCH {line}" in harness, line
    assert "gpus" not in harness
    assert len(_render([], Path("/r")).split("# ---- submitted by the head")) == 2  # none configured: none shown


def test_harness_nodes_need_the_cells_layout(tmp_path: Path) -> None:
    from gyrectl.cluster.slurm.backend import HETJOB as HETJOB_LAYOUT, SlurmBackend
    from gyrectl.errors import UserError

    config = load_config(REPO / "configs/slurm-local.yaml", [HETJOB, "cluster.harnesses.nodes=1"])
    with pytest.raises(UserError, match="cluster.harnesses.nodes: .*cluster.layout: cells"):
        SlurmBackend(HETJOB_LAYOUT).check_before_submitting(config, run_dir=tmp_path / "run")
