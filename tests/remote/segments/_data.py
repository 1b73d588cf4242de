"""Paths to the real broker-written fixtures and a kafka-python cross-check decoder."""

from __future__ import annotations

import binascii
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

# kafka-python 3.0 imports its whole client on `import kafka`, and that uses the
# deprecated importlib.resources.read_text; the warnings-as-errors policy would turn
# that into an import failure of the independent decoder, so import it quietly once.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

DATA = Path(__file__).resolve().parents[2] / "data" / "kafka-segments"
PINTEREST = DATA / "pinterest-tiered-storage"
TIMEINDEX_TEST = PINTEREST / "ts-common/src/test/resources/log-files/timeindex_test"
TOPIC_A = PINTEREST / "ts-consumer/src/test/resources/log-files/test_topic_a-0"
TOPIC_B = PINTEREST / "ts-segment-uploader/src/test/resources/log_segments/test_topic_b-0"
SEGMENTIO = DATA / "segmentio-kafka-go/fixtures"


@dataclass(frozen=True)
class KpRecord:
    """A record as kafka-python (the independent decoder) sees it."""

    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    batch_base_offset: int
    is_control: bool


def kafka_python_records(data: bytes) -> list[KpRecord]:
    """Decode a whole buffer with kafka-python, checking every batch CRC."""
    out: list[KpRecord] = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        magic = batch.magic if hasattr(batch, "magic") else batch._magic
        control = bool(getattr(batch, "is_control_batch", False))
        base = batch.base_offset if magic >= 2 else -1
        for r in batch:
            headers = tuple(getattr(r, "headers", None) or ())
            out.append(KpRecord(r.offset, r.timestamp, r.key, r.value, headers, base, control))
    return out


def segmentio_record_set(name: str) -> bytes:
    """The record set inside a segmentio fetch-response hex dump.

    The record set is the last field of the response: its int32 size is followed by
    exactly that many bytes up to the end, and its first batch has magic 0..2 at +16.
    """
    data = binascii.unhexlify((SEGMENTIO / f"{name}.hex").read_text().strip())
    for p in range(8, len(data) - 17):
        (size,) = struct.unpack_from(">i", data, p - 4)
        if size == len(data) - p and data[p + 16] in (0, 1, 2):
            return data[p:]
    raise AssertionError(f"no record set found in {name}")
