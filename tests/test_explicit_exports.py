"""Every name a module of the project offers is bound in it: no module-level __getattr__.

A module-level ``__getattr__`` hands mypy ``Any`` (or ``object``) for every name it
serves, and lets a module pass another's names off as its own (the registry's names
from the layouts' base, a backend from its package past the layering rules). Names
are imported from their homes instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlmm", "remote", "eventlog", "snapshot")

# module file -> (the names its __getattr__ still serves, the files that import them)


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def bound_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (TYPE_CHECKING imports included)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def test_no_module_has_a_getattr() -> None:
    found = {
        str(path.relative_to(ROOT))
        for path in modules()
        for node in ast.parse(path.read_text(), str(path)).body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
    }
    assert not found, f"module-level __getattr__ in {sorted(found)}"


def test_every_name_in_all_is_bound_in_its_module() -> None:
    unbound = {}
    for path in modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                listed = {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)}
                if missing := sorted(listed - bound_names(tree)):
                    unbound[str(path.relative_to(ROOT))] = missing
    assert not unbound, f"listed in __all__ but not bound: {unbound}"
