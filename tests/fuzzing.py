"""Capped fuzzing of the parsers of bytes we did not write (issue 31).

A *target* is a function ``target(rng: random.Random) -> None`` of a test module: it
builds one input from the real files in ``tests/data`` (or a real encoding) by a seeded,
structure-aware mutation and runs one parser on it, returning for a parse and raising
for a refusal. ``run_fuzz`` runs targets in a child process whose address space is
capped (``RLIMIT_AS``, 1 GiB), each for a time budget, and reports per target how many
inputs ran, how many parsed, how many were refused with an allowed (typed) error, and
every input that ended otherwise: another exception type (MemoryError included), or
more than ``PER_INPUT_SECONDS``. Each input has its own seed, so a finding replays
with ``target(random.Random(seed))``; a hang is named by the seed the child was on
when it was killed.

Invariant: the child's cap and budget hold whatever the parser does (the parent kills
it after the budget plus a grace period); a report without failures, slow inputs or a
crash means every input ended in a parse or an allowed error in time.

``RLMM_FUZZ_SECONDS`` sets the budget per target (default ``DEFAULT_SECONDS``, a
few seconds so the suite stays fast); the long run is e.g. ``RLMM_FUZZ_SECONDS=60``.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import resource
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ADDRESS_SPACE_BYTES = 1 << 30
PER_INPUT_SECONDS = 1.0
DEFAULT_SECONDS = 1.5
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"

# Values that break length and count fields: signed and unsigned edges of every width.
INTERESTING_INTS: tuple[int, ...] = (
    0, 1, 2, 3, 7, 8, 16, 17, 48, 49, 60, 61, 64, 127, 128, 255, 256, 4096, 65535, 65536,
    2**20, 2**24, 2**30, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63,
    2**64 - 1, 2**64, 10**30, -1, -2, -128, -(2**15), -(2**31), -(2**63),
)  # fmt: skip


def budget() -> float:
    return float(os.environ.get("RLMM_FUZZ_SECONDS", DEFAULT_SECONDS))


# --- mutations ------------------------------------------------------------------------------


def interesting_int(rng: random.Random) -> int:
    if rng.random() < 0.8:
        return rng.choice(INTERESTING_INTS)
    return rng.randint(-(2**64), 2**64)


def put_int(rng: random.Random, data: bytearray, at: int, width: int, order: str = "big") -> None:
    """Overwrite ``width`` bytes at ``at`` with an interesting value of that width."""
    value = interesting_int(rng) % (1 << (8 * width))
    if at + width <= len(data):
        data[at : at + width] = value.to_bytes(width, order)  # type: ignore[arg-type]


def mutate_bytes(
    rng: random.Random, data: bytes, fields: Sequence[tuple[int, int]] = (), rounds: int = 0
) -> bytes:
    """1-4 edits of ``data``: bit flips, random bytes, inserts, deletes, splices,
    truncations, and interesting integers in the ``fields`` given as (offset, width) or
    at random aligned offsets."""
    out = bytearray(data)
    for _ in range(rounds or rng.randint(1, 4)):
        op = rng.randrange(9)
        n = len(out)
        if op == 0 and n:
            at = rng.randrange(n)
            out[at] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            out[rng.randrange(n)] = rng.randrange(256)
        elif op == 2:
            at = rng.randint(0, n)
            out[at:at] = rng.randbytes(rng.choice((1, 2, 4, 8, rng.randint(1, 64))))
        elif op == 3 and n:
            at = rng.randrange(n)
            del out[at : at + rng.randint(1, 16)]
        elif op == 4 and n:
            a, b = sorted((rng.randrange(n), rng.randrange(n)))
            at = rng.randint(0, n)
            out[at:at] = out[a : b + 1]
        elif op == 5 and n:
            del out[rng.randrange(n) :]
        elif op in (6, 7) and fields:
            at, width = rng.choice(fields)
            put_int(rng, out, at, width)
        elif n:
            width = rng.choice((1, 2, 4, 8))
            put_int(rng, out, rng.randrange(max(n - width + 1, 1)), width)
    return bytes(out)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*path, i))
    return out


def weird_value(rng: random.Random) -> Any:
    kind = rng.randrange(12)
    if kind < 4:
        return interesting_int(rng)
    return [
        None, True, 1.5e308, "", "x" * rng.choice((1, 100, 10_000)),
        [], {}, [[[[[]]]]], int("9" * rng.choice((19, 40, 400))),
    ][kind - 3]  # fmt: skip


def mutate_json(rng: random.Random, doc: Any) -> Any:
    """A copy of ``doc`` with 1-3 edits at random paths: a value replaced by a weird
    one, a key deleted or added, a number nudged."""
    doc = json.loads(json.dumps(doc))
    for _ in range(rng.randint(1, 3)):
        paths = _paths(doc)
        path = rng.choice(paths)
        if not path:
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        op = rng.randrange(5)
        if op == 0 and isinstance(parent, dict):
            del parent[last]
        elif op == 1 and isinstance(parent, dict):
            parent[rng.choice(("extra", "version", "type", "position", "size"))] = weird_value(rng)
        elif op == 2 and isinstance(parent[last], int) and not isinstance(parent[last], bool):
            parent[last] += rng.choice((-1, 1, -parent[last] - 1, parent[last]))
        else:
            parent[last] = weird_value(rng)
    return doc


def be(fmt: str, *values: int) -> bytes:
    return struct.pack(">" + fmt, *values)


# --- the child ------------------------------------------------------------------------------


def _load(spec: str) -> Callable[[random.Random], None]:
    module, _, name = spec.partition(":")
    target: Callable[[random.Random], None] = getattr(importlib.import_module(module), name)
    return target


def _exception_types(names: Sequence[str]) -> tuple[type[BaseException], ...]:
    out = []
    for dotted in names:
        module, _, name = dotted.rpartition(".")
        out.append(getattr(importlib.import_module(module), name))
    return tuple(out)


def _child(argv: list[str]) -> None:
    # The cap first, before any parser is imported.
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    spec = json.loads(argv[0])
    progress_path = spec["progress"]
    results = []
    master = random.Random(spec["seed"])
    fd = os.open(progress_path, os.O_WRONLY)
    for target_spec, allowed_names in spec["targets"]:
        target = _load(target_spec)
        warm = getattr(sys.modules[target.__module__], "warm", None)
        if warm is not None:
            warm()  # fixtures built once, outside the timed inputs
        allowed = _exception_types(allowed_names)
        ran = parsed = refused = 0
        failures: list[dict[str, Any]] = []
        slow: list[dict[str, Any]] = []
        refusals: dict[str, int] = {}
        slowest = 0.0
        deadline = time.monotonic() + spec["seconds"]
        while time.monotonic() < deadline:
            seed = master.getrandbits(63)
            os.pwrite(fd, f"{target_spec} {seed}\n".ljust(200).encode(), 0)
            began = time.monotonic()
            try:
                target(random.Random(seed))
                parsed += 1
            except allowed as e:
                refused += 1
                kind = type(e).__name__
                refusals[kind] = refusals.get(kind, 0) + 1
            except Exception as e:  # MemoryError and every other type is a finding
                if len(failures) < 20:
                    failures.append(
                        {"seed": seed, "type": type(e).__name__, "message": str(e)[:300]}
                    )
            took = time.monotonic() - began
            slowest = max(slowest, took)
            if took > PER_INPUT_SECONDS and len(slow) < 20:
                slow.append({"seed": seed, "seconds": round(took, 3)})
            ran += 1
        results.append(
            {
                "target": target_spec,
                "inputs": ran,
                "parsed": parsed,
                "refused": refused,
                "refusals": refusals,
                "failures": failures,
                "slow": slow,
                "slowest_seconds": round(slowest, 4),
                "seconds": spec["seconds"],
            }
        )
    os.close(fd)
    print(json.dumps(results))


# --- the parent -----------------------------------------------------------------------------


@dataclass
class FuzzReport:
    target: str
    inputs: int
    parsed: int
    refused: int
    refusals: dict[str, int]
    failures: list[dict[str, Any]] = field(default_factory=list)
    slow: list[dict[str, Any]] = field(default_factory=list)
    slowest_seconds: float = 0.0
    seconds: float = 0.0

    def problems(self) -> list[str]:
        return [f"{self.target} seed {f['seed']}: {f['type']}: {f['message']}" for f in
                self.failures] + [f"{self.target} seed {s['seed']}: {s['seconds']} s"
                                  for s in self.slow]  # fmt: skip


def run_fuzz(
    targets: Sequence[tuple[str, Sequence[str]]],
    seconds: float | None = None,
    seed: int | None = None,
) -> list[FuzzReport]:
    """Run each (``"module:function"``, allowed exception names) for ``seconds`` in one
    child that caps its own address space first; raise AssertionError on a crash or
    hang of the child itself. A target's module may define ``warm()``, called once
    before its timed inputs."""
    each = budget() if seconds is None else seconds
    seed = int(os.environ.get("RLMM_FUZZ_SEED", "0")) if seed is None else seed
    with tempfile.NamedTemporaryFile("w+b", prefix="rlmm-fuzz-") as progress:
        progress.write(b" " * 200)
        progress.flush()
        spec = {
            "targets": [[t, list(allowed)] for t, allowed in targets],
            "seconds": each,
            "seed": seed,
            "progress": progress.name,
        }
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        try:
            child = subprocess.run(
                [sys.executable, "-m", "tests.fuzzing", json.dumps(spec)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=each * len(targets) + 60,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            progress.seek(0)
            raise AssertionError(
                f"the fuzz child hung on {progress.read().decode().strip()}"
            ) from e
        if child.returncode != 0:
            progress.seek(0)
            raise AssertionError(
                f"the fuzz child died (exit {child.returncode}) on"
                f" {progress.read().decode().strip()}: {child.stderr[-3000:]}"
            )
    return [FuzzReport(**r) for r in json.loads(child.stdout.splitlines()[-1])]


def assert_clean(reports: list[FuzzReport], *, min_inputs: int = 20) -> None:
    for r in reports:  # the figures, for -s / -rA and the long runs
        print(
            f"fuzz {r.target}: {r.inputs} inputs in {r.seconds} s, {r.parsed} parsed,"
            f" {r.refused} refused {r.refusals}, slowest {r.slowest_seconds} s,"
            f" {len(r.failures)} failures, {len(r.slow)} slow",
            file=sys.stderr,
        )
    problems = [p for r in reports for p in r.problems()]
    assert not problems, "\n".join(problems)
    for r in reports:
        assert r.inputs >= min_inputs, f"{r.target}: only {r.inputs} inputs in {r.seconds} s"


if __name__ == "__main__":
    _child(sys.argv[1:])
