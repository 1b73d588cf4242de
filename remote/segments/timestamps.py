"""The smallest record timestamp of a batch, and of a segment (KIP-917's missing field).

Kafka records a segment's and a batch's *largest* timestamp, never the smallest: a v2
batch stores a base timestamp plus a signed delta per record, and producers may send
records with older timestamps at any time, so the header's base timestamp is not the
minimum. A reader that knows a segment's smallest timestamp can skip the whole segment
for a time window that ends before it.

Invariant: ``batch_smallest_timestamp`` is the minimum over every record of the batch
(control and transactional records included, as Kafka's ListOffsets counts them),
-1 (Kafka's NO_TIMESTAMP) when a record carries none (magic 0), None for a batch of no
record. Records are decoded only where the header cannot answer (a v2 CreateTime batch,
a compressed magic 1 wrapper), within ``bounded_batch``'s decompression bound; bad
bytes raise SegmentFormatError like every other decoder of this package.
"""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.legacy_records import LegacyRecordBatch

from remote.errors import SegmentFormatError
from remote.segments.batch import (
    COMPRESSION_CODEC_MASK,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
)
from remote.segments.compressed import bounded_batch


def batch_smallest_timestamp(
    header: RecordBatchHeader, data: memoryview | bytes, name: str = "<buffer>"
) -> int | None:
    """The smallest timestamp of the records of one whole batch (``data``, log overhead
    included), -1 when one has none, None when the batch holds no record."""
    if header.magic == 0:
        return NO_TIMESTAMP
    if header.magic == 1:
        if not header.attributes & COMPRESSION_CODEC_MASK or header.attributes & (
            TIMESTAMP_TYPE_MASK
        ):
            # One message, or a wrapper whose inner messages all carry its LogAppendTime.
            return header.max_timestamp
        wrapper = bytes(bounded_batch(header, data, name))
        try:
            stamps = [
                NO_TIMESTAMP if r.timestamp is None else r.timestamp
                for r in LegacyRecordBatch(wrapper, 1)
            ]
        except Exception as e:  # aiokafka raises assorted types on bad record bytes
            raise _undecodable(header, name, e) from e
        return min(stamps, default=None)
    if header.record_count == 0:
        return None
    if header.attributes & TIMESTAMP_TYPE_MASK:
        return header.max_timestamp  # LogAppendTime: every record has the batch's
    records = bounded_batch(header, data, name)
    try:
        return min((r.timestamp for r in DefaultRecordBatch(records)), default=None)
    except Exception as e:  # aiokafka raises assorted types on bad record bytes
        raise _undecodable(header, name, e) from e


def _undecodable(header: RecordBatchHeader, name: str, e: Exception) -> SegmentFormatError:
    return SegmentFormatError(
        f"{name}: cannot decode the record timestamps of the batch at base offset"
        f" {header.base_offset}: {type(e).__name__}: {e} at byte position {header.position}",
        name,
        header.position,
    )


class SmallestTimestamp:
    """The running minimum over the batches handed to ``add`` (a segment's, once every
    batch of it was added); ``value`` is None until a batch held a record."""

    __slots__ = ("name", "value")

    def __init__(self, name: str = "<buffer>") -> None:
        self.name = name
        self.value: int | None = None

    def add(self, header: RecordBatchHeader, data: memoryview | bytes) -> None:
        smallest = batch_smallest_timestamp(header, data, self.name)
        self.merge(smallest)

    def merge(self, smallest: int | None) -> None:
        """Fold in a smallest timestamp learned elsewhere (None: no record)."""
        if smallest is not None and (self.value is None or smallest < self.value):
            self.value = smallest


__all__ = ["SmallestTimestamp", "batch_smallest_timestamp"]
