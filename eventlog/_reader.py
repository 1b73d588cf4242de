"""Reading a file-log segment: one bounded chunk of whole batches at a time.

Runs in a worker thread. Every returned record comes from a batch whose framing, base
offset continuity and CRC-32C were checked; a failure raises ``EventLogCorruptError``
with the file and byte position, never a silently wrong value.

Invariant: reads stay below the ``size`` of the segment as it was when called, which
covers only committed, whole batches.
"""

from __future__ import annotations

from eventlog._batch import BadBatchError, check_batch, decode_batch, peek_size
from eventlog._segment import Segment
from eventlog.errors import EventLogCorruptError


def _corrupt(segment: Segment, position: int, reason: str) -> EventLogCorruptError:
    return EventLogCorruptError(
        f"{segment.path}: batch at byte {position} is corrupt: {reason}",
        str(segment.path),
        position,
    )


def read_chunk(
    segment: Segment, position: int, target: int, expect: int | None, chunk_bytes: int
) -> tuple[list[tuple[int, bytes]], int, int | None]:
    """Records with offset >= ``target`` from whole batches starting at ``position``.

    Returns the records, the position after the last batch consumed and the base
    offset the following batch must have.
    """
    end = segment.size
    with open(segment.path, "rb") as f:
        f.seek(position)
        data = f.read(min(chunk_bytes, end - position))
        try:
            size = peek_size(data, 0)
        except BadBatchError as e:
            raise _corrupt(segment, position, e.reason) from None
        if size is None or size > len(data):
            need = size if size is not None else 0
            if position + need > end or size is None:
                raise _corrupt(segment, position, "batch runs past the end of the segment")
            data += f.read(need - len(data))
    records: list[tuple[int, bytes]] = []
    at = 0
    while at < len(data):
        try:
            info = check_batch(data, at, expect, verify_crc=False)
            if info is None:
                break  # cut by the chunk bound: the next call starts here
            if info.last_offset >= target:
                batch = decode_batch(data[at : at + info.size])
                records.extend(r for r in batch if r[0] >= target)
        except BadBatchError as e:
            raise _corrupt(segment, position + at, e.reason) from None
        at += info.size
        expect = info.next_offset
    return records, position + at, expect
