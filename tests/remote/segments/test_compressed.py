"""remote.segments.compressed: batches decompressed within their bound decode to exactly
the records aiokafka decodes from the batches as Kafka wrote them (every codec, both
the 4.1.1 broker's logs in tests/data/aiven-tiered/plain and the fixtures' legacy
message sets), and the bound is what the module says."""

from __future__ import annotations

import gzip
import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.legacy_records import LegacyRecordBatch

from remote.errors import SegmentFormatError
from remote.segments import RecordBatchReader, decode_batch
from remote.segments.compressed import (
    MAX_RECORDS_LIMIT,
    MIN_RECORDS_LIMIT,
    bounded_batch,
    records_limit,
)
from tests.remote.segments.test_fuzz_readers import logs, v2_batch


def fields(r: object) -> tuple[object, ...]:
    return (r.offset, r.timestamp, r.key, r.value, tuple(getattr(r, "headers", ()) or ()))  # type: ignore[attr-defined]


def test_every_codec_decodes_as_aiokafka_decodes_it() -> None:
    codecs = set()
    for log in logs():
        for header, view in RecordBatchReader(log).batches():
            codecs.add((header.magic, header.compression_type))
            cls = DefaultRecordBatch if header.magic >= 2 else None
            direct = (
                list(cls(bytes(view)))
                if cls is not None
                else list(LegacyRecordBatch(bytes(view), header.magic))
            )
            bounded = bounded_batch(header, view)
            via = (
                list(DefaultRecordBatch(bounded))
                if cls is not None
                else list(LegacyRecordBatch(bytes(bounded), header.magic))
            )
            assert [fields(r) for r in via] == [fields(r) for r in direct]
            assert len(decode_batch(header, view)) == len(direct)
    assert {(2, c) for c in range(5)} <= codecs, codecs


def test_the_bound() -> None:
    assert records_limit(1) == MIN_RECORDS_LIMIT == 16 << 20
    assert records_limit(2 << 20) == 64 << 20
    assert records_limit(1 << 30) == MAX_RECORDS_LIMIT == 128 << 20


@pytest.mark.parametrize("members", [1, 3])
def test_gzip_members_back_to_back_are_read_and_bounded(members: int) -> None:
    each = MIN_RECORDS_LIMIT // members + 1
    payload = b"".join(gzip.compress(bytes(each)) for _ in range(members))
    data = v2_batch(1, payload)
    ((header, view),) = RecordBatchReader(data).batches()
    with pytest.raises(SegmentFormatError, match=r"gzip records .* more than 16777216 bytes"):
        bounded_batch(header, view, "g.log")
    small = v2_batch(1, gzip.compress(b"ab") + gzip.compress(b"cd"))
    ((header, view),) = RecordBatchReader(small).batches()
    out = bytes(bounded_batch(header, view))
    assert out[61:] == b"abcd" and struct.unpack_from(">h", out, 21)[0] & 7 == 0
