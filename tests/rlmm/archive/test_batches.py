"""iter_batches: whole batches out of a stream read in chunks, CRC-checked, named errors."""

from __future__ import annotations

import io
import struct

import pytest

from remote.segments import RecordBatchReader
from rlmm.archive import CorruptBatchError
from rlmm.archive.batches import iter_batches
from tests.remote.segments._data import TOPIC_A, segmentio_record_set

LOG = (TOPIC_A / f"{0:020d}.log").read_bytes()


def positions(data: bytes, chunk: int, start: int = 0) -> list[tuple[int, int]]:
    stream = io.BytesIO(data[start:])
    return [
        (h.position, len(view))
        for h, view in iter_batches(
            stream, start, segment_id="s", object_name="o", chunk_bytes=chunk
        )
    ]


@pytest.mark.parametrize("chunk", [1, 13, 61, 1000, 1 << 20])
@pytest.mark.parametrize(
    "data", [LOG, segmentio_record_set("v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc")]
)
def test_every_chunk_size_gives_the_same_batches(chunk: int, data: bytes) -> None:
    expected = [(h.position, h.size_in_bytes) for h in RecordBatchReader(data).headers()]
    assert positions(data, chunk) == expected
    # A range that starts at a later batch and is cut inside the last one.
    second = expected[1][0]
    cut = data[: expected[-1][0] + 20]
    assert positions(cut, chunk, second) == expected[1:-1]


def test_a_bad_length_is_named_with_its_position() -> None:
    headers = RecordBatchReader(LOG).headers()
    bad = bytearray(LOG)
    struct.pack_into(">i", bad, headers[2].position + 8, 7)  # below the v2 minimum
    with pytest.raises(CorruptBatchError) as caught:
        positions(bytes(bad), 1 << 20)
    assert caught.value.position == headers[2].position
    assert "segment s: object o" in str(caught.value)
