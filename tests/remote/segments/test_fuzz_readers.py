"""Fuzzing the readers of Kafka's segment files under a 1 GiB address-space cap (issue
31): the batch header reader (over bytes and over a file, in small refills), the record
decoder, the offset, time and transaction indexes, the leader-epoch checkpoint, the
producer snapshot and partition.metadata. Inputs are structure-aware mutations of files
brokers wrote (tests/data/kafka-segments, and the logs and packed indexes of
tests/data/aiven-tiered/plain, which Kafka 4.1.1 wrote with every codec): each ends in a
parse or a SegmentFormatError, within a second.

These files reach rlmm from remote storage (LocalTieredStorage keeps Kafka's files
byte for byte; rlmm's and Aiven's layouts hold the same bytes), so they are input.
"""

from __future__ import annotations

import functools
import json
import os
import random
import struct
import tempfile
from pathlib import Path

import crc32c
import pytest

from remote.errors import SegmentFormatError
from remote.segments import (
    RecordBatchReader,
    decode_batch,
    encode_txn_index,
    read_leader_epoch_checkpoint,
    read_offset_index,
    read_partition_metadata,
    read_producer_snapshot,
    read_time_index,
    read_txn_index,
)
from remote.segments.indexes import AbortedTxn
from tests.fuzzing import DATA, assert_clean, interesting_int, mutate_bytes, put_int, run_fuzz

SEGMENTS = DATA / "kafka-segments"
PLAIN = DATA / "aiven-tiered" / "plain" / "bucket"
FORMAT = ["remote.errors.SegmentFormatError"]
HERE = "tests.remote.segments.test_fuzz_readers"
# Fields of a v2 batch header: (offset in the batch, width).
V2_FIELDS = [(8, 4), (12, 4), (16, 1), (17, 4), (21, 2), (23, 4), (27, 8), (43, 8), (57, 4)]
LEGACY_FIELDS = [(8, 4), (12, 4), (16, 1), (17, 1), (18, 8), (26, 4)]


@functools.cache
def logs() -> list[bytes]:
    paths = sorted(SEGMENTS.rglob("*.log")) + sorted(PLAIN.rglob("*.log"))
    return [p.read_bytes() for p in paths]


@functools.cache
def small_logs() -> list[bytes]:
    return [log for log in logs() if len(log) < 64 * 1024]


@functools.cache
def packed_indexes() -> dict[str, list[bytes]]:
    """The plain variant's .indexes objects cut along their manifests (Kafka 4.1.1's own
    offset, time, producer-snapshot and leader-epoch files), plus the fixtures'."""
    out: dict[str, list[bytes]] = {"offset": [], "timestamp": [], "producerSnapshot": []}
    out["leaderEpoch"] = []
    for manifest in sorted(PLAIN.rglob("*.rsm-manifest")):
        doc = json.loads(manifest.read_bytes())
        packed = manifest.with_suffix(".indexes").read_bytes()
        for name, where in doc["segmentIndexes"].items():
            if where and name in out:
                out[name].append(packed[where["position"] : where["position"] + where["size"]])
    for suffix, name in ((".index", "offset"), (".timeindex", "timestamp"), (".snapshot",
                         "producerSnapshot")):  # fmt: skip
        out[name] += [p.read_bytes() for p in sorted(SEGMENTS.rglob(f"*{suffix}"))]
    out["leaderEpoch"] += [
        p.read_bytes() for p in sorted(SEGMENTS.rglob("leader-epoch-checkpoint"))
    ]
    return out


def headers_of(log: bytes) -> list[tuple[int, int]]:
    """(position, magic) of every batch of a real log."""
    return [(h.position, h.magic) for h in RecordBatchReader(log).headers()]


@functools.cache
def batch_positions(index: int) -> list[tuple[int, int]]:
    return headers_of(logs()[index])


def mutate_log(rng: random.Random, logs_: list[bytes]) -> bytes:
    """A real log with header fields of one batch set to interesting values (the CRC
    sometimes resealed so the bad header reaches the deeper checks), or bytes edits."""
    index = rng.randrange(len(logs_))
    log = logs_[index]
    if rng.random() < 0.2:
        return mutate_bytes(rng, log)
    positions = headers_of(log) if logs_ is not logs() else batch_positions(index)
    position, magic = rng.choice(positions)
    out = bytearray(log)
    fields = V2_FIELDS if magic == 2 else LEGACY_FIELDS
    for _ in range(rng.randint(1, 3)):
        at, width = rng.choice(fields)
        put_int(rng, out, position + at, width)
    if magic == 2 and rng.random() < 0.5:
        (length,) = struct.unpack_from(">i", out, position + 8)
        end = min(position + 12 + max(length, 0), len(out))
        struct.pack_into(">I", out, position + 17, crc32c.crc32c(bytes(out[position + 21 : end])))
    if rng.random() < 0.2:
        del out[rng.randrange(len(out)) :]
    return bytes(out)


_FILE = Path(tempfile.gettempdir()) / f"rlmm-fuzz-{os.getpid()}.log"


def v2_batch(codec: int, payload: bytes, count: int = 1) -> bytes:
    """A v2 batch of ``count`` records whose (compressed) records are ``payload``."""
    body = struct.pack(">hiqqqhii", codec, count - 1, 0, 0, -1, -1, -1, count) + payload
    head = struct.pack(">qiib", 0, len(body) + 9, 0, 2)
    return head + struct.pack(">I", crc32c.crc32c(body)) + body


@functools.cache
def bombs() -> list[tuple[int, bytes]]:
    """Compressed payloads of far more zeros than a batch may hold, one per codec."""
    import cramjam
    import lz4.frame

    from tests.remote.layouts.test_fuzz_aiven import bomb

    zeros = bytes(256 << 20)
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    raw = bytes(cramjam.snappy.compress_raw(bytes(1 << 20)))
    return [
        (4, bomb(4 << 30, True)),
        (4, bomb(4 << 30, False)),
        (1, bytes(cramjam.gzip.compress(zeros, level=1))),
        (3, lz4.frame.compress(zeros, store_size=False)),
        (2, xerial + b"".join(struct.pack(">i", len(raw)) + raw for _ in range(40))),
        (2, b"\xff\xff\xff\xff\x0f" + bytes(20)),  # raw snappy claiming 4 GiB
    ]


# --- targets (run in the capped child) ----------------------------------------------------


def warm() -> None:
    for i in range(len(logs())):
        batch_positions(i)
    small_logs(), packed_indexes(), bombs()


def fuzz_batch_reader(rng: random.Random) -> None:
    data = mutate_log(rng, logs())
    options = {
        "verify_crc": rng.random() < 0.5,
        "strict": rng.random() < 0.7,
        "allow_truncated_tail": rng.random() < 0.5,
        # Tiny refills only on small logs: a 1 MB log in 61-byte refills is 17k refills.
        "chunk_size": rng.choice(
            (61, 100, 4096, 1 << 20) if len(data) < 64 << 10 else (4096, 1 << 20, 8 << 20)
        ),
        "max_batch_size": rng.choice((1 << 30, 1 << 20, 100)),
    }
    source: object = data
    if rng.random() < 0.5:
        _FILE.write_bytes(data)
        source = _FILE
    reader = RecordBatchReader(source, **options)  # type: ignore[arg-type]
    try:
        for header, view in reader.batches():
            assert len(view) == header.size_in_bytes
    finally:
        _FILE.unlink(missing_ok=True)
    assert reader.valid_bytes + reader.truncated_bytes == len(data) or reader.error is not None


def fuzz_records(rng: random.Random) -> None:
    if rng.random() < 0.1:
        codec, payload = rng.choice(bombs())
        data = v2_batch(codec, payload, rng.choice((1, 1000, 2**31 - 1)))
    else:
        data = mutate_log(rng, small_logs())
    for header, view in RecordBatchReader(data, verify_crc=rng.random() < 0.3).batches():
        decode_batch(header, view, name="fuzz.log")


def _mutate_entries(rng: random.Random, data: bytes, width: int) -> bytes:
    fields = [(i, w) for i in range(0, len(data), width) for w in (4, 8) if i + w <= len(data)]
    return mutate_bytes(rng, data, fields=fields or [(0, 4)])


def fuzz_offset_index(rng: random.Random) -> None:
    data = _mutate_entries(rng, rng.choice(packed_indexes()["offset"]), 8)
    read_offset_index(data, rng.choice((0, 7729, interesting_int(rng))), name="fuzz.index")


def fuzz_time_index(rng: random.Random) -> None:
    data = _mutate_entries(rng, rng.choice(packed_indexes()["timestamp"]), 12)
    read_time_index(data, rng.choice((0, 7729, interesting_int(rng))), name="fuzz.timeindex")


def fuzz_txn_index(rng: random.Random) -> None:
    txns = [AbortedTxn(rng.randrange(2**20), o, o + rng.randrange(100), o + 100)
            for o in range(0, rng.randrange(1, 40) * 100, 100)]  # fmt: skip
    read_txn_index(_mutate_entries(rng, encode_txn_index(txns), 34), name="fuzz.txnindex")


def fuzz_producer_snapshot(rng: random.Random) -> None:
    out = bytearray(mutate_bytes(rng, rng.choice(packed_indexes()["producerSnapshot"]),
                                 fields=[(0, 2), (2, 4), (6, 4)]))  # fmt: skip
    if len(out) >= 6 and rng.random() < 0.6:  # reseal: the count and entries get read
        struct.pack_into(">I", out, 2, crc32c.crc32c(bytes(out[6:])))
    read_producer_snapshot(bytes(out), name="fuzz.snapshot")


def fuzz_leader_epoch_checkpoint(rng: random.Random) -> None:
    lines = rng.choice(packed_indexes()["leaderEpoch"]).decode().splitlines()
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        op = rng.randrange(4)
        if op == 0:
            lines[i] = " ".join(str(interesting_int(rng)) for _ in lines[i].split() or ["0"])
        elif op == 1:
            lines.insert(i, f"{interesting_int(rng)} {interesting_int(rng)}")
        elif op == 2:
            lines[i] = rng.choice(("", " ", "9" * 5000, "1 2 3", "\x00", "é"))
        else:
            del lines[i:]
            if not lines:
                lines = ["0"]
    data = "\n".join(lines).encode()
    if rng.random() < 0.3:
        data = mutate_bytes(rng, data)
    read_leader_epoch_checkpoint(data, name="fuzz/leader-epoch-checkpoint")


def fuzz_partition_metadata(rng: random.Random) -> None:
    data = next(SEGMENTS.rglob("partition.metadata")).read_bytes()
    read_partition_metadata(mutate_bytes(rng, data), name="fuzz/partition.metadata")


# --- tests --------------------------------------------------------------------------------

TARGETS = [
    "fuzz_batch_reader",
    "fuzz_records",
    "fuzz_offset_index",
    "fuzz_time_index",
    "fuzz_txn_index",
    "fuzz_producer_snapshot",
    "fuzz_leader_epoch_checkpoint",
    "fuzz_partition_metadata",
]


@pytest.mark.parametrize("targets", [TARGETS[:2], TARGETS[2:5], TARGETS[5:]])
def test_fuzz_under_a_1_gib_cap(targets: list[str]) -> None:
    assert_clean(run_fuzz([(f"{HERE}:{t}", FORMAT) for t in targets]))


def test_the_fuzz_inputs_are_real() -> None:
    indexes = packed_indexes()
    assert all(len(indexes[k]) >= 10 for k in indexes), {k: len(v) for k, v in indexes.items()}
    assert len(logs()) >= 15 and all(batch_positions(i) for i in range(len(logs())))
    assert {m for i in range(len(logs())) for _, m in batch_positions(i)} >= {2}


def test_a_batch_declaring_more_than_the_file_holds_is_a_torn_tail_left_unread(
    tmp_path: Path,
) -> None:
    log = logs()[0]
    first = RecordBatchReader(log).headers()[0]
    data = bytearray(log[: first.size_in_bytes + 61])
    struct.pack_into(">i", data, first.size_in_bytes + 8, (1 << 30) - 1)
    path = tmp_path / "torn.log"
    path.write_bytes(bytes(data))
    reader = RecordBatchReader(path, chunk_size=4096)
    assert len(reader.headers()) == 1
    assert (reader.valid_bytes, reader.truncated_bytes) == (first.size_in_bytes, 61)
    strict = RecordBatchReader(path, chunk_size=4096, allow_truncated_tail=False)
    with pytest.raises(Exception, match="61 trailing bytes") as e:
        strict.headers()
    assert type(e.value).__name__ == "SegmentFormatError"


@pytest.mark.parametrize("which", range(6))
def test_a_compressed_batch_past_its_bound_is_a_format_error(which: int) -> None:
    codec, payload = bombs()[which]
    data = v2_batch(codec, payload)
    ((header, view),) = RecordBatchReader(data, verify_crc=True).batches()
    with pytest.raises(SegmentFormatError, match="byte position 0") as e:
        decode_batch(header, view, name="bomb.log")
    assert len(data) < 16 << 20 and e.value.path == "bomb.log"
