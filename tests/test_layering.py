"""Import direction of ARCHITECTURE section 2: eventlog and snapshot are leaves, remote
uses only rlmm.model / rlmm.errors of the project, and nothing imports the outer layer
(rlmm.offload, rlmm.spark, rlmm.cli) except itself; the CLI may import the offloader
(the `rlmm offload` sidecar command is a CLI command over it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlmm", "eventlog", "snapshot", "remote")
OUTER = ("rlmm.offload", "rlmm.spark", "rlmm.cli", "rlmm.restore")
# (importer, imported) pairs of the outer layer that are allowed.
OUTER_ALLOWED = {
    ("rlmm.cli", "rlmm.offload"),
    ("rlmm.cli", "rlmm.restore"),
    ("rlmm.demo", "rlmm.offload"),
}


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", ["eventlog", "snapshot"])
def test_leaves_import_no_sibling(package: str) -> None:
    for path in modules(package):
        bad = {m for m in imports_of(path) if m.split(".")[0] != package}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_remote_uses_only_the_model_of_rlmm() -> None:
    allowed = {"rlmm.model", "rlmm.errors"}
    for path in modules("remote"):
        bad = {m for m in imports_of(path) if m.split(".")[0] != "remote" and m not in allowed}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_model_and_errors_import_nothing_of_the_project() -> None:
    for name in ("model.py", "errors.py"):
        bad = {m for m in imports_of(ROOT / "rlmm" / name) if m not in ("rlmm.errors",)}
        assert not bad, f"rlmm/{name} imports {sorted(bad)}"


def test_nothing_imports_the_outer_layer() -> None:
    for package in PACKAGES:
        for path in modules(package):
            own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for m in imports_of(path):
                outer = next((o for o in OUTER if m == o or m.startswith(o + ".")), None)
                if outer is not None and not own.startswith(outer):
                    importer = next((o for o in OUTER if own.startswith(o)), own)
                    assert (importer, outer) in OUTER_ALLOWED, f"{own} imports the outer layer {m}"


def test_the_core_and_the_archive_do_not_import_the_ops_library() -> None:
    """rlmm.ops sits above the core and the archive, below the users."""
    below = [p for p in modules("rlmm") if p.parent == ROOT / "rlmm" or "archive" in p.parts]
    for path in below:
        bad = {m for m in imports_of(path) if m == "rlmm.ops" or m.startswith("rlmm.ops.")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_remote_layouts_do_not_import_each_other() -> None:
    """The layout factory sits in remote.layouts' __init__; no layout imports another."""
    layouts = [p for p in (ROOT / "remote" / "layouts").glob("*.py") if p.stem != "__init__"]
    names = {f"remote.layouts.{p.stem}" for p in layouts if not p.stem.startswith("_")}
    for path in layouts:
        own = f"remote.layouts.{path.stem}"
        bad = {m for m in imports_of(path) if m in names and m != own}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
