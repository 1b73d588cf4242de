"""Child process for the retention crash test (run as a script, not collected).

``python _retention_child.py DIR PARTITIONS SEED``: appends to every partition of a
FileEventLog with tiny segments and, every few appends, registers a retention claim
whose floor trails the log end, so segment deletions run all the time. Prints
``ack <partition> <offset> <sha256>`` after each acknowledged append and
``claim <partition> <floor>`` after each registration returned; the parent SIGKILLs it.

Invariant: a line is printed only after the operation it reports has returned.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys

from eventlog.file import FileEventLog


async def main(path: str, partitions: int, seed: int) -> None:
    rng = random.Random(seed)
    log = FileEventLog(path, partitions, segment_bytes=1024)
    await log.start()
    ends = await log.end_offsets(range(partitions))
    # Floors only move forward, as a snapshotting owner's do (what is deleted is gone).
    floors = (await log.retention_claims()).claims.get("crasher")
    last = dict(floors.floors) if floors is not None else {}
    print("ready", flush=True)
    while True:
        p = rng.randrange(partitions)
        value = rng.randbytes(rng.randrange(20, 200))
        offset = await log.append(p, value)
        ends[p] = offset + 1
        print(f"ack {p} {offset} {hashlib.sha256(value).hexdigest()}", flush=True)
        if rng.random() < 0.2:
            last = {
                q: max(last.get(q, 0), ends[q] - rng.randrange(5, 40)) for q in range(partitions)
            }
            await log.register_retention("crasher", last, {"note": "test"})
            for q, floor in last.items():
                print(f"claim {q} {floor}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
