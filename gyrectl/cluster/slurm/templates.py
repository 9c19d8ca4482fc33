"""Finds and fills the text templates under ``slurm_templates/`` (or ``$GYRECTL_TEMPLATES``)."""

from __future__ import annotations

import os
import string
from pathlib import Path

from gyrectl.errors import UserError

_REPO_TEMPLATES = Path(__file__).resolve().parents[3] / "slurm_templates"


def templates_dir() -> Path:
    return Path(os.environ.get("GYRECTL_TEMPLATES") or _REPO_TEMPLATES)


def render_template(name: str, **values: str) -> str:
    """Fills template ``name``; values must already be quoted for their context."""
    path = templates_dir() / name
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"template {name} not found in {templates_dir()} (set GYRECTL_TEMPLATES?)") from None
    try:
        return string.Template(text).substitute(values)
    except (KeyError, ValueError) as exc:
        raise UserError(f"template {path} has an unknown or malformed placeholder: {exc}") from None
