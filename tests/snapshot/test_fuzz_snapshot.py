"""Fuzzing snapshot files (read from a shared bucket) and the cache blocks inside them
under a 1 GiB address-space cap (issue 31).

A real snapshot is built from the metadata Kafka's own RLMM wrote
(tests/data/aiven-tiered/*/metadata.jsonl): each partition's cache, as the manager
keeps it, encoded as a block. The frame is mutated (lengths, version, magic) with its
CRC often resealed, since anyone who can write to the bucket can compute a CRC, so the
msgpack body and the blocks are reached too. Every input ends in a Snapshot or a
SnapshotError, every block in a cache or a BlockError, within a second.
"""

from __future__ import annotations

import base64
import functools
import json
import random
import struct

import crc32c
import msgpack

from rlmm.cache import RemoteLogMetadataCache
from rlmm.codec import decode
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    TopicIdPartition,
)
from snapshot import Snapshot, decode_snapshot, encode_snapshot
from tests.fuzzing import DATA, assert_clean, interesting_int, mutate_bytes, run_fuzz, weird_value

HERE = "tests.snapshot.test_fuzz_snapshot"


@functools.cache
def caches() -> dict[TopicIdPartition, RemoteLogMetadataCache]:
    out: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
    for path in sorted((DATA / "aiven-tiered").glob("*/metadata.jsonl")):
        for line in path.read_text().splitlines():
            event = decode(base64.b64decode(json.loads(line)["value"]))
            if isinstance(event, RemoteLogSegmentMetadata):
                tp = event.topic_id_partition
                out.setdefault(tp, RemoteLogMetadataCache(tp)).add_copy_in_progress_segment(event)
            elif isinstance(event, RemoteLogSegmentMetadataUpdate):
                out[event.topic_id_partition].update_remote_log_segment_metadata(event)
    return out


@functools.cache
def blocks() -> list[tuple[TopicIdPartition, bytes]]:
    return [(tp, cache.to_block()) for tp, cache in caches().items()]


@functools.cache
def snapshot_file() -> bytes:
    state = [[tp.topic_id.bytes, tp.topic, tp.partition, block] for tp, block in blocks()]
    return encode_snapshot(Snapshot(3, {0: 40, 1: 17, 2: 22}, state, 1_795_524_366_451))


def warm() -> None:
    snapshot_file()


def reseal(data: bytearray) -> None:
    if len(data) >= 22:
        struct.pack_into(">I", data, len(data) - 4, crc32c.crc32c(bytes(data[:-4])))


def fuzz_snapshot_file(rng: random.Random) -> None:
    data = bytearray(snapshot_file())
    if rng.random() < 0.4:
        data = bytearray(mutate_bytes(rng, bytes(data), fields=[(8, 2), (10, 8)]))
    else:
        body = msgpack.unpackb(bytes(data[18:-4]), strict_map_key=False)
        key = rng.choice(list(body))
        body[key] = weird_value(rng) if rng.random() < 0.5 else interesting_int(rng)
        try:
            packed = msgpack.packb(body)
        except (OverflowError, TypeError, ValueError):
            packed = bytes(data[18:-4])
        data = bytearray(data[:10] + struct.pack(">Q", len(packed)) + packed + bytes(4))
    if rng.random() < 0.8:
        reseal(data)
    decode_snapshot(bytes(data), "s3://shared/snapshots/fuzz.rlmm")


def fuzz_cache_block(rng: random.Random) -> None:
    tp, block = rng.choice(blocks())
    if rng.random() < 0.5:
        # The msgpack header: rows, pairs, dead, total, the epochs' index lengths.
        magic, length = struct.unpack_from("<4sI", block)
        header = msgpack.unpackb(block[8 : 8 + length])
        epoch_fields = [(8, 0, i) for i in range(5)] + [(8, 0, 4, 0)]
        path = rng.choice([(i,) for i in range(len(header))] + epoch_fields)
        node = header
        try:
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = interesting_int(rng) if rng.random() < 0.7 else weird_value(rng)
            head = msgpack.packb(header, use_bin_type=True)
        except (IndexError, TypeError, OverflowError, ValueError):
            head = block[8 : 8 + length]
        end = 8 + len(head)
        rest = block[8 + length + (-(8 + length) % 8) :]
        block = struct.pack("<4sI", magic, len(head)) + head + bytes(-end % 8) + rest
    else:
        block = mutate_bytes(rng, block, fields=[(4, 4)])
    cache = RemoteLogMetadataCache.from_block(tp, block)
    for segment in cache.segments.values():  # a restored cache is read like this
        _ = segment.segment_leader_epochs, segment.custom_metadata
    for epoch, state in list(cache.epochs.items())[:3]:
        cache.list_remote_log_segments(epoch)
        for offset in (*state.starts[:2], *state.ends[-1:], rng.randrange(2**40)):
            cache.remote_log_segment_metadata(epoch, offset)
        cache.next_segment_with_txn_index(epoch, 0)
    cache.list_remote_log_segments()


def test_fuzz_under_a_1_gib_cap() -> None:
    assert_clean(
        run_fuzz(
            [
                (f"{HERE}:fuzz_snapshot_file", ["snapshot.errors.SnapshotError"]),
                (f"{HERE}:fuzz_cache_block", ["rlmm.cache.BlockError"]),
            ]
        )
    )


def test_the_fuzz_inputs_are_real() -> None:
    assert sum(len(c.segments) for c in caches().values()) > 20
    snap = decode_snapshot(snapshot_file())
    for tp_id, topic, partition, block in snap.state:
        tp = next(tp for tp in caches() if tp.topic_id.bytes == tp_id and tp.partition == partition)
        assert topic == tp.topic
        restored = RemoteLogMetadataCache.from_block(tp, block)
        assert len(restored.segments) == len(caches()[tp].segments)
