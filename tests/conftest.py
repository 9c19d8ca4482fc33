"""Shared test helpers: run the real CLI as a user would (a subprocess, its exit code, its output)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``gyrectl ARGS`` in a fresh interpreter, exactly as a user's shell would run it."""
    full_env = {**os.environ, "GYRECTL_TRACEBACK": "", **(env or {})}
    return subprocess.run([sys.executable, "-m", "gyrectl", *args], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def cli():
    return run_cli


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random model's folder, built once per session (about 5 s)."""
    from gyrectl.model.tiny import build_tiny_model
    out = tmp_path_factory.mktemp("models") / "tiny"  # served as "tiny", the folder's name
    build_tiny_model(out)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """The tiny model in float32 with sdpa attention (the CPU training path), eval mode: no
    dropout, so packed and per-path forwards are comparable."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    return model.eval()


_RELEASES: dict[Path, list] = {}
"""Per test directory, what to release once its last test ran (see ``release_with_directory``)."""


@pytest.fixture(scope="session")
def release_with_directory():
    """Registers a callback that runs as soon as the last test of a directory is done, instead of
    at the end of the session: the vLLM servers a directory shares (3 GiB each) would otherwise
    stay up under the directories after it, on a machine with room for a few."""

    def register(directory: Path, callback) -> None:
        _RELEASES.setdefault(directory.resolve(), []).append(callback)

    return register


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    here = Path(str(item.fspath)).parent.resolve()
    if here in _RELEASES and (nextitem is None or Path(str(nextitem.fspath)).parent.resolve() != here):
        for callback in _RELEASES.pop(here):
            callback()
