"""One direction per arrow between the packages of ``gyrectl/``, read from the source with ``ast``
(nothing is imported). Imports inside functions count too: a few are lazy on purpose, to spare
an import's cost (torch, submitit) until it is needed, but a lazy import is still an arrow
between packages. Today's layers, each importing only layers to its left:

    errors, config -> run, store, plan -> capture, cluster -> dedup, gateway, coordinator
      -> scheduler, rollout, train, model, tracking, status -> launch (wiring) -> sim -> cli

Every package names what it may import in the last line of its docstring (``May import: ...``,
read by :func:`may_import`); an import it does not name fails, as do two packages that import
each other, or core and engine packages that import the wiring (``launch``) or the shell
(``cli``), with the files that make each arrow.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "gyrectl"
BELOW_WIRING = ("cluster", "capture", "rollout", "train", "coordinator")
"""Packages that must not import the wiring (``launch``) or the shell (``cli``)."""
WIRING = ("launch", "cli")


def imported_names(tree: ast.AST) -> list[str]:
    """Absolute ``gyrectl.*`` names a module imports, at any depth of its code: the module of an
    ``import``, the module and the name of a ``from ... import`` (``from gyrectl.cluster import
    base`` is ``gyrectl.cluster.base``; ``from gyrectl import errors`` is ``gyrectl.errors``)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name for name in found if name.startswith("gyrectl.")]


def package_arrows() -> dict[tuple[str, str], set[str]]:
    """``(importer, imported)`` packages of ``gyrectl/``, each with the files that make the arrow
    (a top-level module such as ``errors.py`` is a package of its own)."""
    arrows: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        relative = path.relative_to(PACKAGE_ROOT)
        importer = relative.parts[0] if len(relative.parts) > 1 else relative.stem
        for name in imported_names(ast.parse(path.read_text(), filename=str(path))):
            imported = name.split(".")[1]
            if imported != importer:
                arrows[(importer, imported)].add(str(relative))
    return arrows


def test_no_two_packages_import_each_other() -> None:
    arrows = package_arrows()
    both_ways = [f"{a} <-> {b}: {sorted(arrows[(a, b)])} / {sorted(arrows[(b, a)])}"
                 for a, b in sorted(arrows) if a < b and (b, a) in arrows]
    assert not both_ways, "packages import each other:\n" + "\n".join(both_ways)


def test_no_package_reaches_itself_through_others() -> None:
    """A cycle through three or more packages is the same knot as a pair, only harder to see."""
    arrows = package_arrows()
    graph: dict[str, set[str]] = defaultdict(set)
    for importer, imported in arrows:
        graph[importer].add(imported)
    cycles = [cycle for start in sorted(graph) if (cycle := _path_back(graph, start))]
    assert not cycles, "import cycles between packages:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _path_back(graph: dict[str, set[str]], start: str) -> list[str]:
    """A path of arrows from ``start`` back to itself (empty if there is none)."""
    stack, seen = [(start, [start])], set()
    while stack:
        package, path = stack.pop()
        for imported in sorted(graph.get(package, ())):
            if imported == start:
                return [*path, start]
            if imported not in seen:
                seen.add(imported)
                stack.append((imported, [*path, imported]))
    return []


def test_a_cycle_of_three_is_found() -> None:
    assert _path_back({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a") == ["a", "b", "c", "a"]
    assert _path_back({"a": {"b"}, "b": {"c"}, "c": set()}, "a") == []


def test_engines_and_core_do_not_import_the_wiring() -> None:
    arrows = package_arrows()
    upward = [f"{a} -> {b}: {sorted(files)}" for (a, b), files in sorted(arrows.items())
              if a in BELOW_WIRING and b in WIRING]
    assert not upward, "imports of launch or cli from below them:\n" + "\n".join(upward)


def test_imports_are_found_at_any_depth() -> None:
    tree = ast.parse("def f():\n    from gyrectl.launch.head import run_head\n    import gyrectl.cli.app\n"
                     "from .relative import x\nimport os\nfrom gyrectl import errors\n")
    assert imported_names(tree) == ["gyrectl.errors", "gyrectl.launch.head.run_head", "gyrectl.cli.app"]


def test_imports_are_absolute() -> None:
    """A relative import would hide its arrow from every check here."""
    modules = sorted(PACKAGE_ROOT.rglob("*.py"))
    relative = [f"{path.relative_to(PACKAGE_ROOT)}:{node.lineno}" for path in modules
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.level]
    assert not relative, f"relative imports: {relative}"


ALLOWED_LINE = "May import: "
ENTRY = re.compile(r"(\w+)(?: \(([^()]*)\))?")
"""One package of a ``May import`` list, with the only modules of it that may be imported."""
ANY_PACKAGE = re.compile(r"any package(?: but (?P<but>[\w, ]+?))?(?: \(.*\))?")

KNOWN_UNDECLARED: set[str] = set()
"""Imports that break their package's ``May import`` line today and are being removed (issue 24),
as ``file: imported name``. The test expects exactly these: take an entry out with its import."""


def packages_of(root: Path) -> dict[str, list[Path]]:
    """The packages under ``root``, each with its modules. A top-level module such as ``errors.py``
    is a package of its own; ``root``'s ``__init__.py`` and ``__main__.py`` (which only starts the
    CLI) belong to none."""
    packages: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if len(relative.parts) > 1:
            packages[relative.parts[0]].append(path)
        elif relative.stem not in ("__init__", "__main__"):
            packages[relative.stem].append(path)
    return packages


def has_module(root: Path, package: str, name: str) -> bool:
    return (root / package / f"{name}.py").is_file() or (root / package / name / "__init__.py").is_file()


def may_import(root: Path, package: str, packages: set[str]) -> dict[str, frozenset[str] | None]:
    """What ``package`` may import, read from the last line of its docstring: each package, with the
    only modules of it that it may import (None: any). The line is one of

        May import: nothing of gyrectl.
        May import: any package (a remark).
        May import: any package but sim and cli.
        May import: errors, cluster (``base``, ``backend``), coordinator (events).

    Anything else, or a name that is not a package (or not a module of it), is a ``ValueError``:
    a typo must not let an import through."""
    source = root / package / "__init__.py" if (root / package).is_dir() else root / f"{package}.py"
    lines = (ast.get_docstring(ast.parse(source.read_text())) or "").splitlines()
    if not lines or not lines[-1].startswith(ALLOWED_LINE):
        raise ValueError(f"{source}: its docstring does not end with a line '{ALLOWED_LINE}...'")
    text, others = lines[-1].removeprefix(ALLOWED_LINE).removesuffix("."), packages - {package}
    if text == "nothing of gyrectl":
        return {}
    if any_package := ANY_PACKAGE.fullmatch(text):
        but = set(re.split(r", | and ", any_package["but"])) if any_package["but"] else set()
        if unknown := sorted(but - packages):
            raise ValueError(f"{source}: {unknown} are not packages of gyrectl")
        return {other: None for other in others - but}
    if not re.fullmatch(rf"{ENTRY.pattern}(?:, {ENTRY.pattern})*", text):
        raise ValueError(f"{source}: cannot read {lines[-1]!r}")
    allowed: dict[str, frozenset[str] | None] = {}
    for name, modules in ENTRY.findall(text):
        if name not in others:
            raise ValueError(f"{source}: {name!r} is not another package of gyrectl")
        only = frozenset(module.strip(" `") for module in modules.split(",")) if modules else None
        if missing := sorted(module for module in only or () if not has_module(root, name, module)):
            raise ValueError(f"{source}: {name} has no module {missing}")
        allowed[name] = only
    return allowed


def imported_module(root: Path, name: str) -> tuple[str, str]:
    """The package and its module that an imported name lives in: ``gyrectl.cluster.base.Cluster``
    is in ``("cluster", "base")``; a package's own name (``gyrectl.config.Config``) in its
    ``__init__``."""
    parts = name.split(".")
    return parts[1], parts[2] if len(parts) > 2 and has_module(root, parts[1], parts[2]) else "__init__"


def undeclared_imports(root: Path) -> list[str]:
    """Every import of another package that the importer's ``May import`` line does not allow, as
    ``file: imported name``."""
    packages = packages_of(root)
    found = []
    for package, paths in sorted(packages.items()):
        allowed = may_import(root, package, set(packages))
        for path in paths:
            for name in imported_names(ast.parse(path.read_text(), filename=str(path))):
                other, module = imported_module(root, name)
                only = allowed.get(other, frozenset())  # None: any of its modules; not named: none
                if other != package and only is not None and module not in only:
                    found.append(f"{path.relative_to(root)}: {name}")
    return found


def test_every_package_imports_only_what_its_docstring_allows() -> None:
    found = set(undeclared_imports(PACKAGE_ROOT))
    assert not found - KNOWN_UNDECLARED, ("imports that their package's 'May import' line does not allow:\n"
                                          + "\n".join(sorted(found - KNOWN_UNDECLARED)))
    gone = sorted(KNOWN_UNDECLARED - found)
    assert not gone, f"gone, take them out of KNOWN_UNDECLARED: {gone}"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_an_import_the_docstring_does_not_allow_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path / "gyrectl", {
        "__main__.py": "import gyrectl.shell.app\n",
        "errors.py": '"""Errors.\nMay import: nothing of gyrectl."""\n',
        "cluster/__init__.py": '"""Backends.\nMay import: errors."""\n',
        "cluster/base.py": "from gyrectl.errors import UserError\n",
        "cluster/slurm/__init__.py": "from gyrectl.cluster.base import Cluster\n",
        "core/__init__.py": '"""Core.\n\nMay import: errors, cluster (``base``)."""\n',
        "core/loop.py": "from gyrectl import errors\nfrom gyrectl.cluster import base\n"
                        "import gyrectl.cluster.base\n",
        # a module it may not import (in a function), its package's own name, a package it may not import
        "core/lazy.py": "def f():\n    from gyrectl.cluster.slurm import SlurmCluster\n",
        "core/root.py": "from gyrectl.cluster import Cluster\n",
        "core/upward.py": "import gyrectl.shell.app\n",
        "shell/__init__.py": '"""Shell.\nMay import: any package (it is the top)."""\n',
        "shell/app.py": "import gyrectl.core.loop\nfrom gyrectl.cluster.slurm import SlurmCluster\n",
        "sim/__init__.py": '"""Simulator.\nMay import: any package but shell and core."""\n',
        "sim/run.py": "from gyrectl.cluster.base import Cluster\nfrom gyrectl.core.loop import run\n",
    })
    assert undeclared_imports(root) == ["core/lazy.py: gyrectl.cluster.slurm.SlurmCluster",
                                        "core/root.py: gyrectl.cluster.Cluster",
                                        "core/upward.py: gyrectl.shell.app",
                                        "sim/run.py: gyrectl.core.loop.run"]


@pytest.mark.parametrize(("line", "problem"), [
    ("Nothing said.", "does not end with"),
    ("May import: any package below it.", "cannot read"),
    ("May import: cluster, clustr.", "'clustr' is not another package"),
    ("May import: core.", "'core' is not another package"),
    ("May import: cluster (``bsae``).", r"cluster has no module \['bsae'\]"),
    ("May import: any package but shel.", r"\['shel'\] are not packages"),
])
def test_a_may_import_line_that_cannot_be_read_fails(tmp_path: Path, line: str, problem: str) -> None:
    root = _tree(tmp_path / "gyrectl", {
        "cluster/__init__.py": '"""Backends.\nMay import: nothing of gyrectl."""\n', "cluster/base.py": "",
        "core/__init__.py": f'"""Core.\n{line}"""\n',
    })
    with pytest.raises(ValueError, match=problem):
        undeclared_imports(root)


MAX_MODULE_LINES = 400
"""Past this a module holds more than one concept: split it along the seam it has grown."""


def test_no_module_outgrows_one_concept() -> None:
    long = [f"{path.relative_to(PACKAGE_ROOT)}: {n} lines" for path in sorted(PACKAGE_ROOT.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)


def top_level_imports(tree: ast.AST) -> set[str]:
    """Every top-level package a module imports (``torch`` for ``from torch.nn import x``), at any
    depth of its code."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
    return found


def test_dedup_is_numpy_only() -> None:
    """dedup decides (tokens, loss weights, the packing plan) in numpy; the tensors, masks and
    forward pass are the trainer's (``train/packed.py``, ``mask.py``, ``forward.py``)."""
    assert "torch" in top_level_imports(ast.parse("def f():\n    import torch.nn.functional as F\n"))
    modules = sorted((PACKAGE_ROOT / "dedup").rglob("*.py"))
    with_torch = [str(path.relative_to(PACKAGE_ROOT)) for path in modules
                  if "torch" in top_level_imports(ast.parse(path.read_text(), filename=str(path)))]
    assert not with_torch, f"dedup modules importing torch: {with_torch}"
