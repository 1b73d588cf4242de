"""Fuzzing the names of rlmm's side index (issue 31): anyone who can write to its
directory or bucket prefix chooses them. Real entry names, mutated byte by byte and
mixed with junk, end in entries whose every number is in range, or in nothing; a
listing never raises and never costs more than its names, within a second, under a
1 GiB address-space cap.
"""

from __future__ import annotations

import logging
import random
import uuid

from remote.side_index import Entry, entry_name, parse_entries, smallest_of
from tests.fuzzing import assert_clean, interesting_int, mutate_bytes, run_fuzz

HERE = "tests.remote.test_fuzz_side_index"


def fuzz_side_index_names(rng: random.Random) -> None:
    logging.getLogger("remote.side_index").setLevel(logging.CRITICAL)  # warnings by design
    ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(3)]
    names = []
    for _ in range(rng.randrange(1, 20)):
        start = rng.randrange(1 << 20)
        entry = Entry(start, start + rng.randrange(1, 1 << 20), rng.randrange(-1, 1 << 45))
        name = entry_name(rng.choice(ids), entry)
        if rng.random() < 0.5:
            name = mutate_bytes(rng, name.encode()).decode("latin-1")
        elif rng.random() < 0.2:
            name = name.replace(str(entry.start), str(interesting_int(rng)), 1)
        names.append(name)
    found = parse_entries(names, "fuzz")
    for entries in found.values():
        for e in entries:
            assert 0 <= e.start < e.end < 2**63 and -1 <= e.smallest_ms < 2**63
        smallest_of(entries, rng.randrange(1 << 21))


def test_fuzz_under_a_1_gib_cap() -> None:
    assert_clean(run_fuzz([(f"{HERE}:fuzz_side_index_names", [])]))
