"""docs/operations.md shows what the current demo prints: every `$ command` in its
transcripts is run on a fresh `python -m rlmm.cli.demo` store and its output and exit code
must match the document's.

What legitimately differs between two runs is normalised, nothing else: wall-clock
times (the demo's records are from 2023; anything later is "now"), ages of those
records (`rlmm partitions`' newest_age, days and hours, right-aligned), checksums (a gzip
stream records the time it was written, so a gzip segment's bytes and its CRC-32C
change from run to run; custom metadata holds those checksums) and segment ids,
which the offloader draws at random. Ids are matched as a bijection learned from
lines that align token for token, so an id the document uses in a command (`segments
show <id>`) is the same segment in every run. JSON lines longer than `JSON_WIDTH` are
cut with ` …` in the document and compared up to the cut.

`python tests/test_operations_doc.py --write` rewrites the document's outputs from a
fresh run (keeping its ids); review the diff before committing it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "operations.md"
BIN = Path(sys.executable).parent
JSON_WIDTH = 150
# Kafka's base64url uuid text; may follow a '-' (<offset>-<id>.log), may start with one
ID = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z0-9_-]{22}(?![A-Za-z0-9_-])")
# 2024 and later is wall-clock time; the demo's record timestamps are from 2023
NOW_TIME = re.compile(r"20(?:2[4-9]|[3-9]\d)-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z")
NOW_MS = re.compile(r"(?<!\d)1[7-9]\d{11}(?!\d)")
# an age in days (and hours) with the blanks that right-align it in its column
AGE = re.compile(r"\s+\d+d(?: \d{1,2}h)?(?=\s|$)")
CHECKSUM = re.compile(r"(?<![0-9a-zA-Z])(?:0x)?[0-9a-f]{8}(?![0-9a-zA-Z])")
CUSTOM_METADATA = re.compile(r"^(custom_metadata\s+)\S+$")
EXIT = re.compile(r"\[exit (\d+)\]")


@dataclass
class Step:
    command: str
    output: list[str] = field(default_factory=list)
    exit_code: int | None = None


def parse(text: str) -> list[tuple[int, int, list[Step]]]:
    """Every fenced block that starts with `$ `: (first line, end line, steps)."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```") and i + 1 < len(lines) and lines[i + 1].startswith("$ "):
            start, steps = i + 1, []
            i += 1
            while not lines[i].startswith("```"):
                line = lines[i]
                if line.startswith("$ "):
                    steps.append(Step(line[2:]))
                elif (m := EXIT.fullmatch(line)) is not None:
                    steps[-1].exit_code = int(m.group(1))
                elif line or (steps[-1].output and steps[-1].exit_code is None):
                    steps[-1].output.append(line)
                i += 1
            for step in steps:
                while step.output and not step.output[-1]:
                    step.output.pop()
            blocks.append((start, i, steps))
        i += 1
    return blocks


def render(steps: list[Step]) -> list[str]:
    out: list[str] = []
    for n, step in enumerate(steps):
        out.append(f"$ {step.command}")
        out.extend(step.output)
        if step.exit_code is not None:
            out.append(f"[exit {step.exit_code}]")
        if step.exit_code is not None and n + 1 < len(steps):
            out.append("")
    return out


class IdMap:
    """doc id <-> run id, one to one."""

    def __init__(self) -> None:
        self.to_run: dict[str, str] = {}
        self.to_doc: dict[str, str] = {}

    def pair(self, doc: str, run: str) -> None:
        if self.to_run.setdefault(doc, run) != run or self.to_doc.setdefault(run, doc) != doc:
            raise AssertionError(f"segment id {doc} of the document is two ids in this run")

    def learn(self, doc_line: str, run_line: str) -> None:
        doc_tokens, run_tokens = doc_line.split(), run_line.split()
        if len(doc_tokens) != len(run_tokens):
            return
        for d, r in zip(doc_tokens, run_tokens, strict=True):
            # an id alone or at the end of an object name (<offset>-<id>.log)
            for dm, rm in zip(ID.finditer(d), ID.finditer(r), strict=False):
                if (
                    dm.span() == rm.span()
                    and dm.group() != rm.group()
                    and d[: dm.start()] == r[: rm.start()]
                    and _is_id(dm.group(), rm.group())
                ):
                    self.pair(dm.group(), rm.group())

    def doc_text(self, run_text: str) -> str:
        return ID.sub(lambda m: self.to_doc.get(m.group(), m.group()), run_text)

    def run_text(self, doc_text: str) -> str:
        return ID.sub(lambda m: self.to_run.get(m.group(), m.group()), doc_text)


def _is_id(*tokens: str) -> bool:
    # upper-case words of 22 letters (DELETE_SEGMENT_STARTED) are not ids
    return all(not t.replace("_", "").isupper() for t in tokens)


def normalise(line: str) -> str:
    line = AGE.sub(" <age>", NOW_MS.sub("<ms>", NOW_TIME.sub("<time>", line)))
    return CUSTOM_METADATA.sub(r"\1<custom>", CHECKSUM.sub("<crc>", line))


def cut(line: str) -> str:
    if line.startswith("{") and len(line) > JSON_WIDTH:
        return line[: JSON_WIDTH - 2] + " …"
    return line


def run(command: str, cwd: Path) -> tuple[list[str], int]:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "RLMM_CONFIG": "demo-data/demo.toml",
        "COLUMNS": "200",
        "NO_COLOR": "1",
        "TZ": "UTC",
    }
    for name in [n for n in env if n.startswith(("RLMM_", "AWS_")) and n != "RLMM_CONFIG"]:
        del env[name]
    # the S3 example fails for want of credentials, as on a machine that has none
    env["AWS_SHARED_CREDENTIALS_FILE"] = env["AWS_CONFIG_FILE"] = os.devnull
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = (proc.stdout + proc.stderr).replace(f"{cwd}/", "")
    lines = [cut(line.rstrip()) for line in text.rstrip("\n").split("\n")] if text.strip() else []
    return lines, proc.returncode


def replay(workdir: Path, write: bool = False) -> list[str]:
    """Runs every transcript; returns the mismatches (write: rewrites the document)."""
    subprocess.run(
        [sys.executable, "-m", "rlmm.cli.demo", "--data-dir", str(workdir / "demo-data")],
        cwd=workdir,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return replay_text(DOC, workdir, write)


def replay_text(
    doc: Path,
    workdir: Path,
    write: bool = False,
    to_run: Callable[[str], str] = lambda text: text,
    to_doc: Callable[[str], str] = lambda text: text,
) -> list[str]:
    """Runs every transcript of ``doc`` in ``workdir``, commands passed through
    ``to_run`` and their output lines through ``to_doc`` (a doc's stand-ins for what
    differs per run); returns the mismatches (write: rewrites the document)."""
    text = doc.read_text()
    lines = text.split("\n")
    ids, problems = IdMap(), []
    rewritten: list[tuple[int, int, list[str]]] = []
    for start, end, steps in parse(text):
        ran = []
        for step in steps:
            output, code = run(to_run(ids.run_text(step.command)), workdir)
            output = [to_doc(line) for line in output]
            for doc_line, run_line in zip(step.output, output, strict=False):
                ids.learn(doc_line, run_line)
            got = [ids.doc_text(line) for line in output]
            expected_code = step.exit_code if step.exit_code is not None else 0
            if code != expected_code:
                problems.append(f"$ {step.command}: exit {code}, the document says {expected_code}")
            if [normalise(x) for x in got] != [normalise(x) for x in step.output]:
                diff = "\n".join(f"  doc: {d}\n  run: {r}" for d, r in _differing(step.output, got))
                problems.append(f"$ {step.command}: output differs\n{diff}")
            shown = step.exit_code is not None or code != 0 or command_is_rlmm(step.command)
            ran.append(Step(step.command, got, code if shown else None))
        rewritten.append((start, end, render(ran)))
    if write:
        # back to front, so the line numbers of the blocks not yet replaced stay valid
        for start, end, new in reversed(rewritten):
            lines[start:end] = new
        doc.write_text("\n".join(lines))
    return problems


def command_is_rlmm(command: str) -> bool:
    return command.split()[0] == "rlmm"


def _differing(doc: list[str], run: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for n in range(max(len(doc), len(run))):
        d = doc[n] if n < len(doc) else "<none>"
        r = run[n] if n < len(run) else "<none>"
        if normalise(d) != normalise(r):
            pairs.append((d, r))
    return pairs[:6]


@pytest.mark.timeout(600)
def test_operations_doc_shows_the_current_demo(tmp_path: Path) -> None:
    assert parse(DOC.read_text()), "docs/operations.md has no transcripts"
    problems = replay(tmp_path)
    assert not problems, (
        "docs/operations.md no longer matches the demo "
        "(regenerate: python tests/test_operations_doc.py --write):\n" + "\n".join(problems)
    )


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        found = replay(Path(tmp), write="--write" in sys.argv)
    print("\n".join(found) or "docs/operations.md matches the demo")
