"""The heterogeneous sbatch script: pinned by a golden file, values quoted safely.

Regenerate the golden file after an intended change with:
    GYRECTL_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_sbatch.py
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from gyrectl.config import load_config
from gyrectl.launch.sbatch import render_for_config

from tests.conftest import REPO

GOLDEN = Path(__file__).parent / "golden" / "slurm-local.sbatch"


def _render(config_overrides: list[str], run_dir: Path) -> str:
    config = load_config(REPO / "configs/slurm-local.yaml", config_overrides)
    return render_for_config(config, run_dir=run_dir, folder=run_dir / "logs" / "submitit", python="/venv/bin/python")


def test_golden_hetjob_script() -> None:
    text = _render(["cluster.extra_sbatch=['--constraint=lab']", "cluster.setup=['module load cuda']"],
                   Path("/shared/runs/slurm-local"))
    if os.environ.get("GYRECTL_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_hetjob_separates_components_with_the_configured_resources() -> None:
    lines = _render([], Path("/r")).splitlines()
    sep = lines.index("#SBATCH hetjob")
    head, workers = lines[:sep], lines[sep:]
    assert "#SBATCH --nodes=1" in head and "#SBATCH --cpus-per-task=2" in head
    assert "#SBATCH --partition=lab" in head and "#SBATCH --time=00:30:00" in head
    assert "#SBATCH --nodes=4" in workers and "#SBATCH --gpus-per-node=2" in workers
    assert "#SBATCH --partition=lab" in workers and "#SBATCH --cpus-per-task=4" in workers
    # the head function must not run inside srun, or the steps it starts would block
    assert not any(line.startswith("srun") for line in lines)
    # sbatch reads directives only until the first command: every one comes before it
    first_command = next(i for i, l in enumerate(lines) if l and not l.startswith("#"))
    assert all(i < first_command for i, l in enumerate(lines) if l.startswith("#SBATCH"))


def test_paths_with_spaces_and_quotes_are_quoted(tmp_path: Path) -> None:
    run_dir = tmp_path / "my runs" / "it's \"here\""
    text = _render([], run_dir)
    export = next(l for l in text.splitlines() if l.startswith("export GYRECTL_RUN_DIR="))
    # the shell reads back exactly the path we meant
    echoed = subprocess.run(["bash", "-c", f"{export}; printf %s \"$GYRECTL_RUN_DIR\""], capture_output=True,
                            text=True, check=True).stdout
    assert echoed == str(run_dir)
    command = text.strip().splitlines()[-1]
    assert shlex.split(command)[-1] == str(run_dir / "logs" / "submitit")
    output = next(l for l in text.splitlines() if l.startswith("#SBATCH --output="))
    assert shlex.split(output.split("=", 1)[1]) == [str(run_dir / "logs" / "submitit" / "%j_0_log.out")]


def test_dry_run_prints_the_script_and_creates_nothing(tmp_path: Path, cli) -> None:
    result = cli("launch", "configs/slurm-local.yaml", "--dry-run", "--set", f"run.output_root={tmp_path}/runs")
    assert result.returncode == 0, result.stderr
    assert "#SBATCH hetjob" in result.stdout and "#SBATCH --gpus-per-node=2" in result.stdout
    assert not (tmp_path / "runs").exists()
