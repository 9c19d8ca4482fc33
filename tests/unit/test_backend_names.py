"""Only ``gyrectl/cluster/`` knows the backends and layouts by name: everywhere else a backend is
an object that says what it does (``gyrectl.cluster.backend``). Every module outside the package
is read with ``ast`` (nothing is imported), and a comparison of something named ``...backend``
or ``...layout`` (``config.cluster.backend``, ``job["layout"]``, ``backend``) with a string, or
with a tuple, list or set of strings (``in``), fails with the file and line."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "gyrectl"
NAMES = ("backend", "layout")


def _named(node: ast.expr) -> bool:
    """``backend``, ``x.backend``, ``x["backend"]``, ``x.get("backend")`` (and the same for
    ``layout``), also inside a conversion such as ``str(...)``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        return _strings(node.args[0]) and str(node.args[0].value).lower().endswith(NAMES)  # type: ignore[attr-defined]
    if isinstance(node, ast.Call) and len(node.args) == 1:
        return _named(node.args[0])
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        name = str(node.slice.value)
    else:
        return False
    return name.lower().endswith(NAMES)


def _strings(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_strings(e) for e in node.elts)
    return False


def name_comparisons(tree: ast.AST) -> list[int]:
    """Lines where a backend or layout name is compared with a string."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_named(a) and _strings(b) or _strings(a) and _named(b) for a, b in itertools.pairwise(sides)):
                lines.append(node.lineno)
    return lines


def test_no_module_outside_cluster_compares_a_backend_or_layout_name() -> None:
    found = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        if relative.parts[0] == "cluster":
            continue
        found += [f"gyrectl/{relative}:{line}" for line in name_comparisons(ast.parse(path.read_text()))]
    assert not found, ("backend or layout names compared outside gyrectl/cluster/ (ask the backend instead, "
                       "gyrectl.cluster.backend.backend_for):\n" + "\n".join(found))


def test_the_check_sees_each_form() -> None:
    caught = ['config.cluster.backend == "local"', 'job["backend"] != "slurm"', 'layout == "cells"',
              '"hetjob" == config.cluster.layout', 'backend in ("slurm", "local")', 'str(job.get("x")) == "y"',
              'view.job.backend not in ["slurm"]', 'str(job["layout"]) == "cells"', 'job.get("backend") == "local"']
    passed = ['config.cluster.nodes == 4', 'backend is None', 'job["state"] == "pending"', 'backend == other',
              'name == "local"']
    assert [bool(name_comparisons(ast.parse(code))) for code in caught] == [True] * 5 + [False] + [True] * 3
    assert not any(name_comparisons(ast.parse(code)) for code in passed)
