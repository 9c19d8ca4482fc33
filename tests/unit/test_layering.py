"""One direction per arrow between the packages of ``gyrectl/``, read from the source with ``ast``
(nothing is imported; imports inside functions count too). Today's layers, each importing only
layers to its left:

    errors, config -> run, store -> capture, cluster -> dedup, gateway, coordinator
      -> scheduler, rollout, train, model -> launch (wiring) -> sim -> cli

Two packages that import each other, or core and engine packages that import the wiring
(``launch``) or the shell (``cli``), fail with the files that make each arrow.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "gyrectl"
BELOW_WIRING = ("cluster", "capture", "rollout", "train", "coordinator")
"""Packages that must not import the wiring (``launch``) or the shell (``cli``)."""
WIRING = ("launch", "cli")


def imported_modules(tree: ast.AST) -> list[str]:
    """Absolute ``gyrectl.*`` modules a module imports, at any depth of its code."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
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
        for module in imported_modules(ast.parse(path.read_text(), filename=str(path))):
            imported = module.split(".")[1]
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
                     "from .relative import x\nimport os\n")
    assert imported_modules(tree) == ["gyrectl.launch.head", "gyrectl.cli.app"]


MAX_MODULE_LINES = 400
"""Past this a module holds more than one concept: split it along the seam it has grown."""


def test_no_module_outgrows_one_concept() -> None:
    long = [f"{path.relative_to(PACKAGE_ROOT)}: {n} lines" for path in sorted(PACKAGE_ROOT.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)
