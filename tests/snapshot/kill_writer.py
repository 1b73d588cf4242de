"""Child process of the kill test: writes ever-newer snapshots until it is SIGKILLed.

Invariant: snapshot number ``i`` has a state that is a pure function of ``i``
(``expected_state``), and ``i`` is printed on stdout only after ``write`` returned,
so the parent knows the newest completed snapshot at the moment of the kill. On
start it resumes after the newest snapshot ``load_latest`` finds (the real restart
path), and prints ``ready <i>`` first.

Usage: python kill_writer.py DIRECTORY KEEP SIZE_BYTES
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from snapshot import Snapshot, SnapshotStore

PARTITIONS = 50
SEGMENTS = 2000


def expected_state(i: int, size: int) -> dict[str, Any]:
    """The state of snapshot ``i``: a ~``size``-byte blob plus cache-like small lists."""
    return {
        "i": i,
        "blob": i.to_bytes(8, "big") * (size // 8),
        "segments": [[i, k, k * 4096, b"segment-id-16byt", "topic"] for k in range(SEGMENTS)],
    }


def main() -> None:
    directory, keep, size = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    store = SnapshotStore(directory, keep=keep)
    latest = store.load_latest()
    i = 0 if latest is None else int(latest.state["i"]) + 1
    print(f"ready {i - 1}", flush=True)
    while True:
        store.write(Snapshot(PARTITIONS, {i % PARTITIONS: i}, expected_state(i, size), i))
        print(i, flush=True)
        i += 1


if __name__ == "__main__":
    main()
