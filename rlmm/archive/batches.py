"""Record batches of a byte range of a remote ``.log`` object, framed and CRC-checked.

Job: read a fetched stream in large chunks and hand out each whole batch as a
zero-copy view with its parsed header (remote.segments' parser), checking its CRC
(CRC-32C for v2, CRC-32 for magic 0/1) before anyone decodes it.

Invariant: a batch is yielded only when its bytes are complete and its CRC matches;
anything else raises CorruptBatchError naming the segment id, the object and the
byte position of the batch in the object, or, with ``skip_corrupt``, is logged and
the rest of the range skipped (framing cannot be trusted after a bad batch). Bytes
after the last whole batch of the range (a range cut inside a batch) are not an
error: the range's end is where the planner said the wanted batches end. A batch's
length field never sizes a read: memory grows only with the bytes that arrive.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterator
from typing import BinaryIO

import crc32c

from remote.errors import SegmentFormatError
from remote.segments.batch import RecordBatchHeader, parse_batch_header
from rlmm.archive.errors import CorruptBatchError

log = logging.getLogger(__name__)

# Reads of 1 MiB measured fastest (bigger ones cost fresh pages on every read); a batch
# bigger than that is read whole in one go (its length is known from its first 12 bytes).
CHUNK_BYTES = 1 << 20
_V2_CRC_FROM = 21  # the CRC covers attributes .. end of batch
_LEGACY_CRC_FROM = 16  # magic .. end of message
_LENGTH = struct.Struct(">i")


def _check_crc(header: RecordBatchHeader, view: memoryview) -> int | None:
    """The computed CRC when it does not match the stored one, else None."""
    if header.magic >= 2:
        actual = crc32c.crc32c(view[_V2_CRC_FROM:])
    else:
        actual = zlib.crc32(view[_LEGACY_CRC_FROM:])
    return None if actual == header.crc else actual


def iter_batches(
    stream: BinaryIO,
    start_position: int,
    *,
    segment_id: str,
    object_name: str,
    skip_corrupt: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[tuple[RecordBatchHeader, memoryview]]:
    """(header, batch bytes) of every whole batch in ``stream``, which starts at
    ``start_position`` of the object."""
    buf = memoryview(b"")
    pos = 0
    base = start_position  # object position of buf[0]
    while True:
        try:
            header = parse_batch_header(buf, pos, base + pos, object_name)
        except SegmentFormatError as e:
            error = CorruptBatchError(
                f"segment {segment_id}: object {object_name}: {e}",
                segment_id,
                object_name,
                base + pos,
            )
            if not skip_corrupt:
                raise error from e
            log.warning("%s; skipping the rest of the range", error)
            return
        if header is None:
            tail = len(buf) - pos
            want = chunk_bytes
            if tail >= 12:
                # Read just the rest of the cut batch: only that batch is copied twice.
                (length,) = _LENGTH.unpack_from(buf, pos + 8)
                want = max(12 + length - tail, 1)
            # In reads of at most chunk_bytes: a length field is not trusted with an
            # allocation (a read(n) allocates n), only the bytes that arrive are kept.
            pieces: list[bytes] = []
            got = 0
            while got < want:
                data = stream.read(min(want - got, chunk_bytes))
                if not data:
                    break
                pieces.append(data)
                got += len(data)
            if not got:
                return
            if pos < len(buf) or len(pieces) > 1:
                merged = bytearray(buf[pos:])
                for data in pieces:
                    merged += data
                buf = memoryview(merged)
            else:
                buf = memoryview(pieces[0])
            base += pos
            pos = 0
            continue
        view = buf[pos : pos + header.size_in_bytes]
        bad = _check_crc(header, view)
        if bad is not None:
            kind = "CRC-32C" if header.magic >= 2 else "CRC-32"
            error = CorruptBatchError(
                f"segment {segment_id}: object {object_name}: record batch at byte position"
                f" {header.position} (offsets {header.base_offset}..{header.last_offset}) fails"
                f" its {kind} check (stored {header.crc:#010x}, computed {bad:#010x})",
                segment_id,
                object_name,
                header.position,
            )
            if not skip_corrupt:
                raise error
            log.warning("%s; batch skipped", error)
        else:
            yield header, view
        pos += header.size_in_bytes


__all__ = ["iter_batches"]
