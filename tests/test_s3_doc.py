"""docs/s3.md shows what rlmm prints on moto's S3: every `$ command` in its transcripts
is run, in order, against a fresh moto server (in a process of its own, on a free port
that stands in for the document's 5000) and a fresh `python -m rlmm.cli.demo` (whose
Kafka log dirs the sidecar copies), with the document's own TOML block written as
`s3-demo.toml`; each output and exit code must match the document's.

What may differ between two runs is normalised as tests/test_operations_doc.py does
(wall-clock times, record ages, checksums, segment ids); nothing else.

`python -m tests.test_s3_doc --write` rewrites the document's outputs from a fresh run;
review the diff before committing it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.s3 import moto_process
from tests.test_operations_doc import parse, replay_text

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "s3.md"
DOC_ENDPOINT = "127.0.0.1:5000"
CONFIG_NAME = "s3-demo.toml"
TOML_BLOCK = re.compile(r"^```toml\n(# s3-demo\.toml.*?)^```", re.S | re.M)


def config_text(doc: str) -> str:
    """The document's TOML block: what a reader saves as s3-demo.toml."""
    found = TOML_BLOCK.findall(doc)
    assert len(found) == 1, "docs/s3.md must hold one ```toml block starting '# s3-demo.toml'"
    return str(found[0])


def replay(workdir: Path, endpoint: str, write: bool = False) -> list[str]:
    """Runs every transcript of docs/s3.md in order; the mismatches (write: rewrites
    the document's outputs)."""
    subprocess.run(
        [sys.executable, "-m", "rlmm.cli.demo", "--data-dir", str(workdir / "demo-data")],
        cwd=workdir,
        check=True,
        capture_output=True,
        timeout=300,
    )
    here = endpoint.removeprefix("http://")
    text = DOC.read_text()
    toml = config_text(text)
    assert DOC_ENDPOINT in toml, f"the document's config does not name {DOC_ENDPOINT}"
    (workdir / CONFIG_NAME).write_text(toml.replace(DOC_ENDPOINT, here))
    return replay_text(
        DOC, workdir, write,
        to_run=lambda command: command.replace(DOC_ENDPOINT, here),
        to_doc=lambda line: line.replace(here, DOC_ENDPOINT),
    )  # fmt: skip


def test_the_document_s_config_is_rlmm_s3_config(tmp_path: Path) -> None:
    """The TOML a reader saves loads, and places segments and snapshots in the bucket."""
    from rlmm.config import load_config

    path = tmp_path / CONFIG_NAME
    path.write_text(config_text(DOC.read_text()))
    config = load_config(path, env={})
    assert config.remote["type"] == "s3" and config.remote["bucket"] == "tiered"
    assert config.remote["endpoint_url"] == f"http://{DOC_ENDPOINT}"
    assert config.snapshot["store"] == "s3"


@pytest.mark.s3
@pytest.mark.timeout(600)
def test_s3_doc_shows_what_rlmm_prints_on_moto(tmp_path: Path) -> None:
    steps = [s for _, _, block in parse(DOC.read_text()) for s in block]
    commands = " ".join(s.command for s in steps)
    for needed in ("curl", "rlmm offload", "segments list", "verify --deep"):
        assert needed in commands, f"docs/s3.md no longer runs {needed}"
    with moto_process() as endpoint:
        problems = replay(tmp_path, endpoint)
    assert not problems, (
        "docs/s3.md no longer matches what rlmm prints on moto "
        "(regenerate: python -m tests.test_s3_doc --write):\n" + "\n".join(problems)
    )


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, moto_process() as url:
        found = replay(Path(tmp), url, write="--write" in sys.argv)
    print("\n".join(found) or "docs/s3.md matches what rlmm prints on moto")
