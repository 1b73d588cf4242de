"""Restore progress in the target cluster: one compacted record per (target, source partition).

Job: the record a restore's transaction writes beside the data it restores (key
``<target topic>:<source partition>``, a JSON value naming the source, the range and
the next source offset to read), and the read_committed scan that finds the newest
committed record of each key of one target topic.

Invariants: progress is read under read_committed only, so it is exactly the progress
whose data committed with it (an aborted or open transaction's record is never seen);
a key names its target topic first and topic names cannot hold ``:``, so one target's
keys never match another's; an unknown ``version`` is refused, never guessed at.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from rlmm.restore.errors import RestoreError, TargetClusterError
from rlmm.topics import RESTORE_PROGRESS_TOPIC

PROGRESS_TOPIC = RESTORE_PROGRESS_TOPIC  # the sidecar skips it (rlmm.topics)
VERSION = 1
READ_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Progress:
    """How far one source partition's restore into one target topic has committed."""

    target_topic: str
    source_partition: int
    source_topic: str
    topic_id: str
    partitioner: str
    first_offset: int
    end_offset: int  # exclusive
    next_offset: int  # the next source offset to read
    records: int  # records committed so far, over every run
    updated_ms: int

    @property
    def done(self) -> bool:
        return self.next_offset >= self.end_offset

    @property
    def key(self) -> bytes:
        return progress_key(self.target_topic, self.source_partition)

    def value(self) -> bytes:
        return json.dumps({"version": VERSION, **asdict(self)}, sort_keys=True).encode()

    def source_text(self) -> str:
        return (
            f"{self.source_topic}-{self.source_partition} (topic id {self.topic_id}), offsets"
            f" [{self.first_offset}, {self.end_offset}), partitioner {self.partitioner}"
        )

    @classmethod
    def decode(cls, value: bytes) -> Progress:
        try:
            fields = json.loads(value)
            version = fields.pop("version")
        except (ValueError, KeyError, AttributeError, TypeError) as e:
            raise RestoreError(f"unreadable restore progress record {value[:200]!r}: {e}") from e
        if version != VERSION:
            raise RestoreError(
                f"restore progress record of version {version!r}: this rlmm reads version"
                f" {VERSION} (a newer rlmm wrote it?)"
            )
        try:
            return cls(**fields)
        except TypeError as e:
            raise RestoreError(f"unreadable restore progress record {fields!r}: {e}") from e


def committed_reader(client: Mapping[str, Any], client_id: str) -> AIOKafkaConsumer:
    """A read_committed consumer of assigned partitions (not started), reading each
    from its log start: no group, no committed offset."""
    return AIOKafkaConsumer(
        **client,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
        client_id=client_id,
    )


def progress_key(target_topic: str, source_partition: int) -> bytes:
    return f"{target_topic}:{source_partition}".encode()


def now_ms() -> int:
    return int(time.time() * 1000)


async def read_progress(
    client: Mapping[str, Any],
    target_topic: str,
    partitions: int,
    *,
    topic: str = PROGRESS_TOPIC,
    timeout_s: float = READ_TIMEOUT_S,
) -> dict[int, Progress]:
    """Source partition -> the newest committed progress into ``target_topic``, from
    the ``partitions`` partitions of the progress topic (0: it does not exist)."""
    prefix = f"{target_topic}:".encode()
    found = await read_committed_keys(
        client, topic, partitions, prefix, what="the restore progress", timeout_s=timeout_s
    )
    out: dict[int, Progress] = {}
    for key, value in found.items():
        try:
            p = int(key[len(prefix) :])
        except ValueError:
            continue  # another kind of record of this target
        out[p] = Progress.decode(value)
    return out


async def read_committed_keys(
    client: Mapping[str, Any],
    topic: str,
    partitions: int,
    prefix: bytes,
    *,
    what: str,
    timeout_s: float = READ_TIMEOUT_S,
) -> dict[bytes, bytes]:
    """Key -> newest committed value of every key starting with ``prefix`` in the
    ``partitions`` partitions of ``topic`` (0: it does not exist), a tombstone dropping
    its key; read_committed up to the last stable offsets. TargetClusterError naming
    ``what`` when it cannot be read whole."""
    out: dict[bytes, bytes] = {}
    if partitions == 0:
        return out
    consumer = committed_reader(client, "rlmm-restore-progress")
    try:
        async with asyncio.timeout(timeout_s):
            await consumer.start()
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            # Under read_committed these are the last stable offsets: everything below
            # is decided, and an open transaction's records lie above.
            ends = await consumer.end_offsets(tps)
            # A position moves as getmany hands records out (and past the markers and
            # aborted records read_committed skips): the scan ends at the stable end,
            # whatever a running restore commits meanwhile.
            while behind := [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                batches = await consumer.getmany(*behind, timeout_ms=500)
                for records in batches.values():
                    for record in records:
                        if record.offset >= ends[TopicPartition(topic, record.partition)]:
                            continue
                        if record.key is None or not record.key.startswith(prefix):
                            continue
                        if record.value is None:  # a tombstone: that key was dropped
                            out.pop(record.key, None)
                        else:
                            out[record.key] = record.value
    except TimeoutError as e:
        raise TargetClusterError(
            f"reading {what} in {topic!r} took longer than {timeout_s}s"
        ) from e
    except KafkaError as e:
        raise TargetClusterError(f"cannot read {what} in {topic!r}: {e}") from e
    finally:
        await consumer.stop()
    return out


__all__ = [
    "PROGRESS_TOPIC",
    "Progress",
    "committed_reader",
    "now_ms",
    "progress_key",
    "read_committed_keys",
    "read_progress",
]
