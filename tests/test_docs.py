"""The project documents itself: every relative link in README.md and docs/ resolves
inside the repository (a clone has nothing outside it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_stay_inside_the_repository(doc: Path) -> None:
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
            continue
        resolved = (doc.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{doc.name} links outside the repo: {target}"
        assert resolved.exists(), f"{doc.name} links to a missing file: {target}"
