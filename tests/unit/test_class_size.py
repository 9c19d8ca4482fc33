"""No class under gyrectl/ keeps more than 12 instance attributes: a class that holds more is
doing more than one job (LiveRollouts held 28: gateway, harnesses, servers, claims, evaluations
and the clock in one object). Counted as the distinct ``self.NAME`` a class assigns in its own
methods; a dataclass's fields are data, not the state of a room, and are not counted."""

from __future__ import annotations

import ast
from pathlib import Path

GYRECTL = Path(__file__).resolve().parents[2] / "gyrectl"
LIMIT = 12


def instance_attributes(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                        names.add(part.attr)
    return names


def classes_over(limit: int, root: Path) -> dict[str, int]:
    over = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef) and len(attributes := instance_attributes(node)) > limit:
                over[f"{path.relative_to(root.parent)}:{node.name}"] = len(attributes)
    return over


def test_no_class_keeps_more_than_twelve_instance_attributes() -> None:
    assert classes_over(LIMIT, GYRECTL) == {}


def test_the_count_sees_every_kind_of_assignment(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "room.py").write_text(
        "class Room:\n"
        "    def __init__(self):\n"
        "        self.a, self.b = 1, 2\n"
        "        self.c: int = 3\n"
        "    def later(self):\n"
        "        self.d += 1\n"
        "        other.e = 5\n")
    assert classes_over(3, tmp_path / "pkg") == {"pkg/room.py:Room": 4}
