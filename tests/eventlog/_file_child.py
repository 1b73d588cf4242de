"""Child process for the file log's cross-process tests (run as a script, not collected).

Modes (argv[1]):
  hold DIR N            open DIR as writer, print "ready", hold the lock until stdin closes
  write DIR N COUNT     append COUNT records to partition 0 (paced, small segments so they
                        roll), printing "ready" after the first; then wait for stdin to close
  crash DIR N SEED      append forever from many tasks with fsync=always; after each ack
                        print "<partition> <offset> <sha256 of value>" (flushed); the parent
                        SIGKILLs it

Invariant: a line is printed only after its append returned, so every printed line is
an acknowledged record the parent may demand after the kill.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys

from eventlog.file import FileEventLog


async def _wait_for_stdin_close() -> None:
    await asyncio.to_thread(sys.stdin.read)


async def hold(path: str, partitions: int) -> None:
    async with FileEventLog(path, partitions):
        print("ready", flush=True)
        await _wait_for_stdin_close()


async def write(path: str, partitions: int, count: int) -> None:
    async with FileEventLog(path, partitions, segment_bytes=2048) as log:
        for i in range(count):
            await log.append(0, f"record-{i:05d}-".encode() * 8)
            if i == 0:
                print("ready", flush=True)
            await asyncio.sleep(0.002)
        print("done", flush=True)
        await _wait_for_stdin_close()


async def crash(path: str, partitions: int, seed: int) -> None:
    rng = random.Random(seed)
    log = FileEventLog(path, partitions, fsync="always", segment_bytes=16 * 1024)
    await log.start()
    print("ready", flush=True)

    async def writer(worker: int) -> None:
        while True:
            partition = rng.randrange(partitions)
            if rng.random() < 0.2:
                values = [rng.randbytes(rng.randrange(1, 600)) for _ in range(rng.randrange(1, 5))]
                offsets = await log.append_batch(partition, values)
            else:
                values = [rng.randbytes(rng.randrange(1, 600))]
                offsets = [await log.append(partition, values[0], key=b"w%d" % worker)]
            lines = (
                f"{partition} {o} {hashlib.sha256(v).hexdigest()}\n"
                for o, v in zip(offsets, values, strict=True)
            )
            sys.stdout.write("".join(lines))
            sys.stdout.flush()

    await asyncio.gather(*(writer(w) for w in range(32)))


def main() -> None:
    mode, path, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "hold":
        asyncio.run(hold(path, partitions))
    elif mode == "write":
        asyncio.run(write(path, partitions, int(sys.argv[4])))
    elif mode == "crash":
        asyncio.run(crash(path, partitions, int(sys.argv[4])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
