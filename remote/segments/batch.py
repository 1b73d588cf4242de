"""Record batch framing of a Kafka log segment: find every batch and parse its header.

Job: walk a segment file (or a byte buffer) batch by batch, parsing Kafka's RecordBatch
v2 header (61 bytes) and the legacy magic 0/1 message-set header with ``struct`` and
never copying a batch body, so that a header-only scan runs at disk speed.

Invariant: the reader yields only complete batches that start exactly where the
previous one ended; ``valid_bytes`` is always the end of the last batch yielded. A torn
tail (an active segment copied mid-write) ends the scan cleanly, as Kafka's
``FileLogInputStream`` does; anything else that is not Kafka's format raises
:class:`~remote.errors.SegmentFormatError` naming the file and byte position (strict
mode) or ends the scan with that error kept in ``error`` (recovery mode). No other
exception type escapes for bad bytes. A length field never sizes memory beyond the
bytes that are there: it is checked against ``max_batch_size`` and, for a file, against
the bytes left in it (a batch that ends past the end is a torn tail, not read); a big
batch is read into one buffer sized once, so it is copied once, not once per chunk.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO, NamedTuple

import crc32c

from remote.errors import SegmentFormatError

# Offsets shared by every magic: offset int64, length int32, then (v2) leader epoch
# int32 or (v0/v1) crc uint32, then magic int8 at byte 16.
LOG_OVERHEAD = 12
HEADER_SIZE_UP_TO_MAGIC = 17
MAGIC_OFFSET = 16

# RecordBatch v2 header (DefaultRecordBatch in Kafka).
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_HEADER_SIZE = V2_HEADER.size  # 61
V2_CRC_OFFSET = 17
V2_ATTRIBUTES_OFFSET = 21
# Legacy message headers (LegacyRecord in Kafka): crc, magic, attributes[, timestamp].
V0_HEADER = struct.Struct(">qiIbb")
V1_HEADER = struct.Struct(">qiIbbq")
V0_RECORD_OVERHEAD = 14  # crc 4 + magic 1 + attributes 1 + key len 4 + value len 4
V1_RECORD_OVERHEAD = 22  # + timestamp 8
V2_MIN_BATCH_LENGTH = V2_HEADER_SIZE - LOG_OVERHEAD  # 49: a batch of zero records

# Attribute bits (Kafka's RecordBatch / LegacyRecord constants).
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

# A length above this is corrupt, not torn: no broker accepts a batch of 1 GiB
# (message.max.bytes defaults to ~1 MiB) and a segment is at most 2 GiB.
DEFAULT_MAX_BATCH_SIZE = 1 << 30
DEFAULT_CHUNK_SIZE = 8 << 20

_unpack_v2 = V2_HEADER.unpack_from
_unpack_v0 = V0_HEADER.unpack_from
_unpack_v1 = V1_HEADER.unpack_from
_unpack_len_magic = struct.Struct(">qi4xb").unpack_from
_unpack_length = struct.Struct(">i").unpack_from

Source = str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryIO
# refill(tail, need): a new buffer starting with ``tail`` and holding at least ``need``
# bytes if the source has them, None at its end.
Refill = Callable[[memoryview, int], "memoryview | None"]


class RecordBatchHeader(NamedTuple):
    """The header of one batch as it sits in a segment file (offsets absolute).

    ``position`` is the byte position of the batch in its file or buffer and
    ``size_in_bytes`` its full size (log overhead included), so the next batch starts
    at ``position + size_in_bytes``. Legacy (magic 0/1) batches have no producer
    fields (-1) and no leader epoch (-1); a compressed legacy wrapper carries only
    its last offset, so ``base_offset`` equals ``last_offset`` and ``record_count`` is
    -1 (unknown until decoded). Magic 0 has no timestamps (-1).
    """

    position: int
    size_in_bytes: int
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression_type(self) -> int:
        """Kafka's codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime, -1 none (magic 0)."""
        if self.magic == 0:
            return -1
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def end_position(self) -> int:
        return self.position + self.size_in_bytes


def _fail(message: str, name: str, position: int) -> SegmentFormatError:
    return SegmentFormatError(f"{name}: {message} at byte position {position}", name, position)


def parse_batch_header(
    buf: memoryview | bytes | bytearray,
    pos: int,
    file_position: int,
    name: str,
    *,
    verify_crc: bool = False,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> RecordBatchHeader | None:
    """Parse the batch starting at ``buf[pos]`` (``file_position`` in the file).

    Returns None when ``buf`` ends before the batch does (a torn tail if ``buf``
    holds the rest of the file); raises SegmentFormatError for a batch that is not
    Kafka's format or (``verify_crc``) whose checksum does not match.
    """
    remaining = len(buf) - pos
    if remaining < HEADER_SIZE_UP_TO_MAGIC:
        return None
    offset, length, magic = _unpack_len_magic(buf, pos)
    if magic == 2:
        if length < V2_MIN_BATCH_LENGTH:
            raise _fail(
                f"record batch length {length} below the minimum {V2_MIN_BATCH_LENGTH}",
                name,
                file_position,
            )
    elif magic == 1 or magic == 0:
        minimum = V1_RECORD_OVERHEAD if magic == 1 else V0_RECORD_OVERHEAD
        if length < minimum:
            raise _fail(
                f"magic {magic} message length {length} below the minimum {minimum}",
                name,
                file_position,
            )
    else:
        raise _fail(f"unknown magic byte {magic} (offset field {offset})", name, file_position)
    if length > max_batch_size:
        raise _fail(
            f"record batch length {length} above the maximum {max_batch_size}",
            name,
            file_position,
        )
    size = LOG_OVERHEAD + length
    if size > remaining:
        return None
    if magic == 2:
        return _parse_v2(buf, pos, file_position, size, name, verify_crc)
    return _parse_legacy(buf, pos, file_position, size, magic, name, verify_crc)


def _parse_v2(
    buf: memoryview | bytes | bytearray,
    pos: int,
    file_position: int,
    size: int,
    name: str,
    verify_crc: bool,
) -> RecordBatchHeader:
    """A RecordBatch v2 header whose batch (``size`` bytes) is all in ``buf``."""
    (
        base_offset,
        _,
        leader_epoch,
        _,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    ) = _unpack_v2(buf, pos)
    crc &= 0xFFFFFFFF
    if verify_crc:
        actual = crc32c.crc32c(buf[pos + V2_ATTRIBUTES_OFFSET : pos + size])
        if actual != crc:
            raise _fail(
                f"record batch CRC-32C mismatch (stored {crc:#010x}, computed "
                f"{actual:#010x}) for base offset {base_offset}",
                name,
                file_position,
            )
    if last_offset_delta < 0 or record_count < 0:
        raise _fail(
            f"record batch at base offset {base_offset} has negative last offset delta "
            f"{last_offset_delta} or record count {record_count}",
            name,
            file_position,
        )
    return RecordBatchHeader(
        file_position,
        size,
        base_offset,
        base_offset + last_offset_delta,
        leader_epoch,
        2,
        crc,
        attributes & 0xFFFF,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )


def _parse_legacy(
    buf: memoryview | bytes | bytearray,
    pos: int,
    file_position: int,
    size: int,
    magic: int,
    name: str,
    verify_crc: bool,
) -> RecordBatchHeader:
    if magic == 1:
        offset, _, crc, _, attributes, timestamp = _unpack_v1(buf, pos)
    else:
        offset, _, crc, _, attributes = _unpack_v0(buf, pos)
        timestamp = NO_TIMESTAMP
    if verify_crc:
        # Legacy messages use CRC-32 (zlib) over magic..end.
        actual = zlib.crc32(buf[pos + MAGIC_OFFSET : pos + size])
        if actual != crc:
            raise _fail(
                f"magic {magic} message CRC-32 mismatch (stored {crc:#010x}, computed "
                f"{actual:#010x}) for offset {offset}",
                name,
                file_position,
            )
    compressed = attributes & COMPRESSION_CODEC_MASK != 0
    return RecordBatchHeader(
        file_position,
        size,
        offset,
        offset,
        NO_PARTITION_LEADER_EPOCH,
        magic,
        crc,
        attributes & 0xFF,
        timestamp,
        timestamp,
        NO_PRODUCER_ID,
        NO_PRODUCER_EPOCH,
        NO_SEQUENCE,
        -1 if compressed else 1,
    )


class RecordBatchReader:
    """Iterate the batches of one segment file or buffer, from ``start_position``.

    ``verify_crc`` checks each batch checksum (off by default for header scans).
    ``strict`` raises on a corrupt batch; with ``strict=False`` the scan stops there
    like Kafka's segment recovery and keeps the error in ``error``. A torn tail ends
    the scan cleanly unless ``allow_truncated_tail`` is False, where it raises.
    After iteration, ``valid_bytes`` is the end of the last whole batch and
    ``truncated_bytes`` the bytes after it that were not consumed.
    """

    def __init__(
        self,
        source: Source,
        *,
        name: str | None = None,
        verify_crc: bool = False,
        strict: bool = True,
        allow_truncated_tail: bool = True,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        start_position: int = 0,
    ) -> None:
        if chunk_size < V2_HEADER_SIZE:
            raise ValueError(f"chunk_size {chunk_size} below {V2_HEADER_SIZE}")
        self._source = source
        if name is None:
            if isinstance(source, str | os.PathLike):
                name = os.fspath(source)
            else:
                name = getattr(source, "name", None) or "<buffer>"
        self.name: str = str(name)
        self.verify_crc = verify_crc
        self.strict = strict
        self.allow_truncated_tail = allow_truncated_tail
        self.max_batch_size = max_batch_size
        self.chunk_size = chunk_size
        self.start_position = start_position
        self.valid_bytes = start_position
        self.truncated_bytes = 0
        self.batch_count = 0
        self.error: SegmentFormatError | None = None
        self._view = memoryview(b"")
        self._unread = 0  # bytes of a torn tail left unread at the end of a file

    def __iter__(self) -> Iterator[RecordBatchHeader]:
        return self._run(views=False)

    def headers(self) -> list[RecordBatchHeader]:
        """Every batch header (the whole scan)."""
        return list(self._run(views=False))

    def batches(self) -> Iterator[tuple[RecordBatchHeader, memoryview]]:
        """Each batch header with a zero-copy view of the batch bytes (log overhead included)."""
        for header in self._run(views=True):
            yield header, self._view

    def _run(self, views: bool) -> Iterator[RecordBatchHeader]:
        self.valid_bytes = self.start_position
        self.truncated_bytes = 0
        self.batch_count = 0
        self.error = None
        self._unread = 0
        source = self._source
        if isinstance(source, bytes | bytearray | memoryview):
            whole = memoryview(source)[self.start_position :]
            yield from self._scan(whole, lambda tail, need: None, views)
            return
        if isinstance(source, str | os.PathLike):
            try:
                f: BinaryIO = open(source, "rb")  # noqa: SIM115 - closed by the with below
            except OSError as e:
                raise SegmentFormatError(f"{self.name}: cannot open: {e}", self.name, 0) from e
            with f:
                yield from self._scan_file(f, views)
            return
        yield from self._scan_file(source, views)

    def _scan_file(self, f: BinaryIO, views: bool) -> Iterator[RecordBatchHeader]:
        try:
            f.seek(self.start_position)
        except (OSError, io.UnsupportedOperation) as e:
            raise SegmentFormatError(
                f"{self.name}: cannot seek: {e}", self.name, self.start_position
            ) from e
        chunk_size = self.chunk_size
        try:
            file_size: int | None = os.fstat(f.fileno()).st_size
        except (OSError, AttributeError, io.UnsupportedOperation):
            file_size = None  # not a real file (BytesIO, pipe): read whole chunks

        def refill(tail: memoryview, need: int) -> memoryview | None:
            # A fresh buffer per refill keeps every view handed out valid. It holds the
            # carried-over tail and at least the ``need`` bytes the cut batch declares,
            # so a big batch is copied once, not once per chunk; but it only grows with
            # bytes that are really there: a declared length past the end of the file
            # is a torn tail, counted without being read.
            keep = len(tail)
            want = max(chunk_size, need - keep)
            if file_size is not None:
                left = max(file_size - f.tell(), 0)
                if keep + left < need:
                    self._unread = left
                    return None
                want = min(want, max(left, 1 << 16))
                buf = bytearray(keep + want)
                buf[:keep] = tail
                try:
                    n = f.readinto(memoryview(buf)[keep:])  # type: ignore[attr-defined]
                except OSError as e:
                    raise SegmentFormatError(
                        f"{self.name}: read failed: {e}", self.name, self.valid_bytes
                    ) from e
                return memoryview(buf)[: keep + n] if n else None
            pieces = [tail.tobytes()]
            have = 0
            while have < want:
                try:
                    piece = f.read(min(chunk_size, want - have))
                except OSError as e:
                    raise SegmentFormatError(
                        f"{self.name}: read failed: {e}", self.name, self.valid_bytes
                    ) from e
                if not piece:
                    break
                pieces.append(piece)
                have += len(piece)
            return memoryview(bytearray(b"".join(pieces))) if have else None

        yield from self._scan(memoryview(b""), refill, views)

    def _scan(self, buf: memoryview, refill: Refill, views: bool) -> Iterator[RecordBatchHeader]:
        name = self.name
        verify = self.verify_crc
        max_size = self.max_batch_size
        pos = 0
        base = self.start_position  # file position of buf[0]
        buf_len = len(buf)
        new = tuple.__new__
        while True:
            # Fast path (most batches): a whole, well-formed v2 batch, no CRC check. The
            # checks are the ones parse_batch_header makes; anything else takes the
            # slow path below, which raises the precise error.
            if not verify and buf_len - pos >= V2_HEADER_SIZE:
                f = _unpack_v2(buf, pos)
                length = f[1]
                if (
                    f[3] == 2
                    and V2_MIN_BATCH_LENGTH <= length <= max_size
                    and pos + LOG_OVERHEAD + length <= buf_len
                    and f[6] >= 0
                    and f[12] >= 0
                ):
                    size = LOG_OVERHEAD + length
                    header = new(
                        RecordBatchHeader,
                        (base + pos, size, f[0], f[0] + f[6], f[2], 2, f[4], f[5] & 0xFFFF, *f[7:]),
                    )
                    if views:
                        self._view = buf[pos : pos + size]
                    pos += size
                    self.valid_bytes = base + pos
                    self.batch_count += 1
                    yield header
                    continue
            try:
                parsed = parse_batch_header(
                    buf, pos, base + pos, name, verify_crc=verify, max_batch_size=max_size
                )
            except SegmentFormatError as e:
                self.truncated_bytes = self._rest(buf[pos:], refill)
                if self.strict:
                    raise
                self.error = e
                return
            if parsed is not None:
                header = parsed
                size = header.size_in_bytes
                if views:
                    self._view = buf[pos : pos + size]
                pos += size
                self.valid_bytes = base + pos
                self.batch_count += 1
                yield header
                continue
            # Need more bytes: carry the unconsumed tail into the next buffer, with room
            # for the rest of the cut batch when its length is already there.
            need = HEADER_SIZE_UP_TO_MAGIC
            if buf_len - pos >= LOG_OVERHEAD:
                length = _unpack_length(buf, pos + 8)[0]
                need = LOG_OVERHEAD + min(max(length, 0), max_size)
            nxt = refill(buf[pos:], need)
            if nxt is None:
                break
            base += pos
            pos = 0
            buf = nxt
            buf_len = len(buf)
        leftover = len(buf) - pos + self._unread
        self.truncated_bytes = leftover
        if leftover and not self.allow_truncated_tail:
            torn = _fail(
                f"truncated record batch: {leftover} trailing bytes do not hold a whole batch"
                f" (end of data at {base + len(buf) + self._unread})",
                name,
                base + pos,
            )
            if self.strict:
                raise torn
            self.error = torn

    def _rest(self, tail: memoryview, refill: Refill) -> int:
        # Count what lies after the corrupt batch without holding it all in memory.
        total = len(tail)
        empty = memoryview(b"")
        while (more := refill(empty, 0)) is not None:
            total += len(more)
        return total + self._unread


def iter_batch_headers(source: Source, **options: object) -> Iterator[RecordBatchHeader]:
    """Shorthand for ``iter(RecordBatchReader(source, **options))``."""
    return iter(RecordBatchReader(source, **options))  # type: ignore[arg-type]


__all__ = [
    "CONTROL_FLAG_MASK",
    "LOG_OVERHEAD",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_FLAG_MASK",
    "V2_HEADER_SIZE",
    "RecordBatchHeader",
    "RecordBatchReader",
    "iter_batch_headers",
    "parse_batch_header",
]
