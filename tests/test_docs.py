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


# Measured figures (times, rates, ratios) have one source, docs/benchmarks.md: these
# docs (the README's summary too) point to it and may quote a figure only as it gives
# it, so a new run that updates it cannot leave them behind.
QUOTING_THE_BENCHMARKS = ["README.md", "docs/spark.md", "docs/tiered-storage.md"]
FIGURE = re.compile(
    r"(?<![\w.])\d[\d.,]*\s?(?:[kM] )?(?:records/s|MB/s|GB/s|µs|ms|s|\u00d7)(?![\w/])"
)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


@pytest.mark.parametrize("name", QUOTING_THE_BENCHMARKS)
def test_benchmark_figures_come_from_the_benchmarks_page(name: str) -> None:
    figures = (ROOT / "docs" / "benchmarks.md").read_text()
    prose = FENCE.sub("", (ROOT / name).read_text())  # transcripts are not figures
    if name == "README.md":  # its usage has durations; its figures are its summary
        prose = prose[prose.index("## Benchmarks") :]
    stray = sorted({m.group() for m in FIGURE.finditer(prose) if m.group() not in figures})
    assert not stray, f"{name} gives figures docs/benchmarks.md does not: {stray}"


def fenced_after(text: str, marker: str) -> list[str]:
    """The lines of the first fenced block after ``marker``."""
    rest = text[text.index(marker) :]
    start = rest.index("```\n") + 4
    return rest[start : rest.index("```", start)].rstrip("\n").split("\n")


def test_the_readme_s_demo_output_is_part_of_the_spark_doc_s() -> None:
    """One demo transcript: the README shows the end of docs/spark.md's (which
    tests/rlmm/spark/test_example.py holds to what the demo prints)."""
    readme = fenced_after((ROOT / "README.md").read_text(), "From `make demo`")
    doc = fenced_after((ROOT / "docs" / "spark.md").read_text(), "## The example")
    assert doc[0].startswith("$ ") and "examples/spark_read.py" in doc[0]
    shown = doc[1:]
    assert any(shown[i : i + len(readme)] == readme for i in range(len(shown) - len(readme) + 1)), (
        readme
    )
