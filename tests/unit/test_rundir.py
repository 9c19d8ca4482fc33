from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gyrectl.errors import UserError
from gyrectl.launch.rundir import RunDir


def test_created_private_with_a_secret_token(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "root", "r1")
    assert stat.S_IMODE(run.path.stat().st_mode) == 0o700
    assert stat.S_IMODE(run.token_file.stat().st_mode) == 0o600
    assert len(run.token()) >= 32
    other = RunDir.create(tmp_path / "root", "r2")
    assert other.token() != run.token()
    for sub in (run.trajectories_dir, run.checkpoints_dir, run.logs_dir, run.submit_dir):
        assert sub.is_dir()


def test_never_reuses_an_existing_run(tmp_path: Path) -> None:
    RunDir.create(tmp_path, "r")
    with pytest.raises(UserError, match="already exists"):
        RunDir.create(tmp_path, "r")


def test_open_by_path_or_by_name(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    run.config_file.write_text("{}\n")
    assert RunDir.open(str(run.path)).path == run.path
    assert RunDir.open("r", output_root=tmp_path).path == run.path
    with pytest.raises(UserError, match="no gyrectl run"):
        RunDir.open("missing", output_root=tmp_path)


def test_json_written_atomically(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r")
    run.write_json(run.nodes_file, [{"name": "n"}])
    assert run.read_json(run.nodes_file) == [{"name": "n"}]
    assert not list(run.path.glob(".*.tmp"))
