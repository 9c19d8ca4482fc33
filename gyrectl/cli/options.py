"""Options several commands share, declared once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

ConfigArg = Annotated[Path, typer.Argument(help="YAML config file (see configs/).", show_default=False)]
SetOpt = Annotated[list[str], typer.Option(
    "--set", "-s", metavar="KEY=VALUE",
    help="Override a config field, e.g. --set cluster.nodes=8 (repeatable; VALUE is read as YAML).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print only machine-readable JSON on stdout.")]
RunArg = Annotated[str, typer.Argument(
    help="Run directory, or a run name under --root.", show_default=False)]
RootOpt = Annotated[Path, typer.Option(
    "--root", envvar="GYRECTL_OUTPUT_ROOT",
    help="Output root that run names are looked up in (a config's run.output_root).")]

DEFAULT_ROOT = Path(os.environ.get("GYRECTL_OUTPUT_ROOT", "runs"))
