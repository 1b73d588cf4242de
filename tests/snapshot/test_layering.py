"""snapshot is a leaf package (ARCHITECTURE §2): it imports no sibling package."""

from __future__ import annotations

import ast
from pathlib import Path

import snapshot

SIBLINGS = {"rlmm", "eventlog", "remote", "tests"}


def test_snapshot_imports_no_sibling_package() -> None:
    package_dir = Path(snapshot.__file__).parent
    offenders = []
    for source in sorted(package_dir.glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [
                f"{source.name}:{node.lineno} imports {name}"
                for name in names
                if name.split(".")[0] in SIBLINGS
            ]
    assert offenders == []


def test_public_names_are_exported() -> None:
    for name in snapshot.__all__:
        assert getattr(snapshot, name) is not None
