"""docs/architecture.md's map holds to the tree: every directory and module that its
section 2 ("Packages and layering", with its "Inside ..." tables) names exists, and
every top-level package, every subpackage of rlmm and of remote, and every module of
the core (``rlmm/*.py``) is named there.

How a name in backquotes is read as a path: a directory (``rlmm/cache/``, ``bench/``)
or a name with a slash (``remote/topic_configs.py``) from the repository's root,
``...`` standing for any directories between; a bare file name (``metrics.py``) from
the first path named on its line (a table row: ``rlmm/cache/`` then ``partition.py``),
else from the package of its "Inside ..." table. Only names ending in ``/``, ``.py``
or ``.java`` are paths.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
TOKEN = re.compile(r"`([^`\s]+)`")
PATH = re.compile(r"[\w.\-/]+(?:/|\.py|\.java)")
# The package whose modules an "Inside ..." table names by their bare names.
TABLE_PACKAGES = {
    "Inside the core": "rlmm",
    "Inside the plugin": "rlmm/plugin",
    "Inside the offloader": "rlmm/offload",
}


def layout_section() -> str:
    text = DOC.read_text()
    start = text.index("\n## 2. ")
    return text[start : text.index("\n## 3. ", start)]


def resolve(name: str, anchor: Path) -> Path:
    """The path ``name`` stands for (see the module's docstring); a name with ``...``
    resolves to the one file it matches, or to a path that does not exist."""
    if "/" not in name:
        return anchor / name
    if "..." in name:
        found = sorted(ROOT.glob(name.replace("...", "**")))
        return found[0] if len(found) == 1 else ROOT / name
    return ROOT / name


def named_paths() -> list[tuple[str, Path]]:
    """Every path the section names, as written and resolved."""
    named: list[tuple[str, Path]] = []
    package = ROOT
    for line in layout_section().splitlines():
        if line.startswith("### "):
            package = ROOT / TABLE_PACKAGES.get(line[4:].strip(), "")
            continue
        anchor: Path | None = None
        for name in TOKEN.findall(line):
            if not PATH.fullmatch(name):
                continue
            path = resolve(name, anchor or package)
            named.append((name, path))
            if anchor is None:
                anchor = path if name.endswith("/") else path.parent
    return named


def test_every_path_named_exists() -> None:
    named = named_paths()
    assert len(named) > 40  # the reading above still finds the tables
    missing = [
        f"{name} ({path.relative_to(ROOT)})"
        for name, path in named
        if not (path.is_dir() if name.endswith("/") else path.is_file())
    ]
    assert not missing, f"docs/architecture.md section 2 names what the tree lacks: {missing}"


def test_every_package_and_core_module_is_named() -> None:
    named = {path for _, path in named_paths()}
    packages = {init.parent for init in ROOT.glob("*/__init__.py")}
    assert {p.name for p in packages} >= {"rlmm", "eventlog", "snapshot", "remote"}
    subpackages = {
        init.parent for top in ("rlmm", "remote") for init in ROOT.glob(f"{top}/*/__init__.py")
    }
    core = {path for path in ROOT.glob("rlmm/*.py") if path.name != "__init__.py"}
    unnamed = sorted(str(p.relative_to(ROOT)) for p in (packages | subpackages | core) - named)
    assert not unnamed, f"docs/architecture.md section 2 does not name: {unnamed}"
