"""The distribution ships every package: a wheel built from pyproject.toml holds each
directory with an ``__init__.py`` under the four top-level packages (an editable
install would hide a missing one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("rlmm", "eventlog", "snapshot", "remote")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found == listed, f"missing: {sorted(found - listed)}, stale: {sorted(listed - found)}"
