"""Config values reach shell lines, ``#SBATCH`` lines, srun and command lines and environment
variables. Every string field of the schema (found by walking it, so a new field is covered too)
refuses control characters with its field path before any script is rendered; non-finite numbers,
YAML aliases, runaway nesting and non-UTF-8 files are clear config errors (exit 2, no traceback);
every shipped config renders scripts that bash accepts."""

from __future__ import annotations

import dataclasses
import json
import resource
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from gyrectl.cluster.slurm.sbatch import render_for_config
from gyrectl.config import load_config
from gyrectl.config.schema import Config
from gyrectl.errors import ConfigError
from tests.conftest import REPO

BASE = "configs/slurm-local.yaml"  # a Slurm config: `launch --dry-run` renders its script
CONTROL = ["\n", "\r", "\x00", "\t", "\x1b", "\x7f", "\x85", "\u2028"]


def _fields(cls: type, prefix: str = "") -> typing.Iterator[tuple[str, typing.Any]]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _fields(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", hints[f.name]


def _hostile(path: str, tp: typing.Any, text: str) -> tuple[str, str] | None:
    """A ``--set`` putting ``text`` into field ``path``, and the path the error must name."""
    value = json.dumps(text)  # a JSON string is a YAML double-quoted one, escapes included
    if tp is str:
        return f"{path}={value}", path
    if typing.get_origin(tp) is tuple:
        return f"{path}=[\"ok\", {value}]", f"{path}[1]"
    if typing.get_origin(tp) is dict:
        return f"{path}={{k: [1, {value}]}}", f"{path}.k[1]"
    return None  # numbers, booleans, Literal choices: no free text


STRING_FIELDS = [(p, tp) for p, tp in _fields(Config) if _hostile(p, tp, "") is not None]
FLOAT_FIELDS = [p for p, tp in _fields(Config) if tp is float]


def test_the_walk_finds_the_fields_that_reach_scripts() -> None:
    found = {p for p, _ in STRING_FIELDS}
    assert {"run.name", "run.output_root", "cluster.partition", "cluster.account", "cluster.qos",
            "cluster.head.partition", "cluster.extra_sbatch", "cluster.setup", "model.path",
            "rollout.harness_command", "rollout.engine_args", "rollout.verifier"} <= found
    assert "training.lr" in FLOAT_FIELDS


@pytest.mark.parametrize("path,tp", STRING_FIELDS, ids=[p for p, _ in STRING_FIELDS])
def test_a_newline_in_any_string_field_renders_no_script(cli, path: str, tp: typing.Any) -> None:
    override, field = _hostile(path, tp, "x\n#SBATCH --wrap=evil")
    result = cli("launch", BASE, "--dry-run", "--set", override)
    assert result.returncode == 2, result.stdout
    assert f"{field}: " in result.stderr and "control character '\\n'" in result.stderr
    assert "#SBATCH" not in result.stdout  # the error comes before any script
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("char", CONTROL, ids=[repr(c) for c in CONTROL])
@pytest.mark.parametrize("path,tp", STRING_FIELDS, ids=[p for p, _ in STRING_FIELDS])
def test_every_control_character_is_refused_with_the_field_path(path: str, tp: typing.Any, char: str) -> None:
    override, field = _hostile(path, tp, f"ab{char}c")
    with pytest.raises(ConfigError) as info:
        load_config(REPO / BASE, [override])
    assert info.value.path == field and f"{char!r} at position 2" in info.value.message


def test_a_control_character_in_a_mapping_key_names_the_key(cli) -> None:
    result = cli("config", "check", BASE, "--set", 'rollout.engine_args={"max-model-len\\n--x": 1}')
    assert result.returncode == 2 and "rollout.engine_args: key 'max-model-len\\n--x'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
@pytest.mark.parametrize("path", FLOAT_FIELDS)
def test_float_fields_refuse_non_finite_numbers(path: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(REPO / BASE, [f"{path}={value}"])
    assert info.value.path == path and "finite" in info.value.message


@pytest.mark.parametrize("override,field", [("training.lr=.nan", "training.lr"),
                                            ("rollout.engine_args={gpu-memory-utilization: .inf}",
                                             "rollout.engine_args.gpu-memory-utilization")])
def test_non_finite_numbers_are_config_errors_on_the_cli(cli, override: str, field: str) -> None:
    result = cli("config", "check", BASE, "--set", override)
    assert result.returncode == 2 and f"{field}: must be a finite number" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("override,message", [
    ("cluster.nodes=99999999999999999999", "cluster.nodes: 99999999999999999999 does not fit a 64-bit integer"),
    ("run.seed=-1", "run.seed: must be at least 0, got -1"),  # numpy's generators refuse it
])
def test_integers_numpy_and_torch_cannot_take_are_config_errors(cli, override: str, message: str) -> None:
    result = cli("config", "check", BASE, "--set", override)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_percent_in_the_slurm_run_directory_is_refused_before_anything_exists(cli, tmp_path: Path) -> None:
    root = tmp_path / "runs%j"  # Slurm would write the logs to runs<JOBID>/...
    for extra in (["--dry-run"], []):
        result = cli("launch", BASE, "--set", f"run.output_root={root}", *extra)
        assert result.returncode == 2 and "holds '%', which Slurm expands" in result.stderr
        assert "#SBATCH" not in result.stdout and "Traceback" not in result.stderr
    assert not root.exists()


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\nrun: {name: bomb}\n"


def _limited_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI under 2 GiB of address space and 15 s: a loader that expanded the bomb again
    fails this test instead of taking the machine's memory."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    return subprocess.run([sys.executable, "-m", "gyrectl", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=15, preexec_fn=limit)


def test_an_alias_bomb_is_refused_at_its_first_alias(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(9))  # 10^9 strings once expanded
    result = _limited_cli("config", "check", str(path))
    assert result.returncode == 2, result.stderr
    assert "aliases (*a0) are not allowed" in result.stderr and "line 2, column 10" in result.stderr
    assert "Traceback" not in result.stderr


def test_aliases_in_set_values_are_refused_too(cli) -> None:
    result = cli("config", "check", BASE, "--set", "rollout.engine_args={a: &x [1, 2], b: *x}")
    assert result.returncode == 2 and "rollout.engine_args: --set value" in result.stderr
    assert "aliases (*x) are not allowed" in result.stderr and "Traceback" not in result.stderr


def test_runaway_nesting_is_refused(cli, tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("rollout:\n  engine_args:\n    x: " + "[" * 5000 + "]" * 5000 + "\n")
    result = cli("config", "check", str(path))
    assert result.returncode == 2 and "nested deeper than 32 levels" in result.stderr and "line 3" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_config_that_is_not_utf8_is_a_config_error(cli, tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("run:\n  name: café\n".encode("latin-1"))
    result = cli("config", "check", str(path))
    assert result.returncode == 2, result.stderr
    assert f"{path} is not UTF-8 text (byte 0xe9 on line 2)" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_plain_anchors_and_documents_without_aliases_still_load(tmp_path: Path) -> None:
    path = tmp_path / "anchor.yaml"
    path.write_text("run: &run {name: anchored}\n")
    assert load_config(path).run.name == "anchored"


SHIPPED = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("layout", ["cells", "hetjob"])
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_renders_a_script_bash_accepts(tmp_path: Path, path: Path, layout: str) -> None:
    config = load_config(path, [f"cluster.layout={layout}"])
    run_dir = tmp_path / "my runs" / config.run.name
    script = tmp_path / "job.sbatch"
    script.write_text(render_for_config(config, run_dir=run_dir, folder=run_dir / "logs" / "submitit",
                                        python=sys.executable))
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
