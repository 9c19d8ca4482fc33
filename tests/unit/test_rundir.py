from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gyrectl.errors import UserError
from gyrectl.run.rundir import RunDir


def test_created_private_with_a_secret_token(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "root", "r1")
    assert stat.S_IMODE(run.path.stat().st_mode) == 0o700
    assert stat.S_IMODE(run.token_file.stat().st_mode) == 0o600
    assert len(run.token()) >= 32
    other = RunDir.create(tmp_path / "root", "r2")
    assert other.token() != run.token()
    secrets = [run.token(), run.admin_token(), run.server_key()]
    assert len(set(secrets)) == 3 and all(len(s) >= 32 for s in secrets)
    for secret in (run.admin_token_file, run.server_key_file):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    for sub in (run.trajectories_dir, run.checkpoints_dir, run.logs_dir, run.submit_dir):
        assert sub.is_dir()


def test_a_run_from_before_the_admin_token_gets_its_secrets_on_first_use(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "old")
    run.admin_token_file.unlink()
    run.server_key_file.unlink()
    admin, key = run.admin_token(), run.server_key()
    assert len(admin) >= 32 and admin != run.token() and admin != key
    assert run.admin_token() == admin and run.server_key() == key  # made once, then read back
    assert stat.S_IMODE(run.admin_token_file.stat().st_mode) == 0o600


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
