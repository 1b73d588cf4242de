"""Verification of remote storage: the metadata against the stored objects, both ways.

The library side of ``rlmm verify``. From a read-only MetadataView and the RSM's
inventory it finds, each naming its segment id or object:

- ``missing_object``: an object of a COPY_SEGMENT_FINISHED segment is not stored;
- ``size_mismatch``: a stored object's size differs from the manifest (or, without
  one, the log object's size from ``segment_size_in_bytes``);
- ``checksum_mismatch`` (deep): its CRC-32C differs from the manifest's;
- ``batch_crc_error`` (deep): a record batch of the log object fails its own CRC;
- ``orphan_object``: an object no live segment owns (or a temp file of a copy that
  never published), older than the safety window;
- ``stuck_copy_started`` / ``stuck_delete_started``: a segment left in a STARTED state
  for longer than the safety window;
- ``lineage_gap``: offsets missing between consecutive segments of the lineage;
- ``stale_multipart_upload``: an open multipart upload older than the window (S3).

Invariant: nothing here writes; anything younger than the safety window is never a
problem (a copy or delete may be in flight), so a problem found is one the metadata
and the objects prove.
"""

from __future__ import annotations

import enum
import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO, cast

from remote.errors import SegmentFormatError
from remote.segments.batch import RecordBatchReader
from remote.storage import (
    OBJECT_KINDS,
    IndexType,
    ObjectChecksum,
    ObjectKind,
    RemoteObject,
    RemoteStorageManager,
    SegmentManifest,
    crc32c_of,
    object_name,
    parse_object_name,
)
from rlmm.archive import MetadataView
from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, kafka_uuid_to_str

DEFAULT_SAFETY_WINDOW_S = 3600.0
_S = RemoteLogSegmentState
_MANDATORY = (
    None,
    IndexType.OFFSET,
    IndexType.TIMESTAMP,
    IndexType.PRODUCER_SNAPSHOT,
    IndexType.LEADER_EPOCH,
)
_READ_CHUNK = 4 * 1024 * 1024


class ProblemKind(enum.StrEnum):
    MISSING_OBJECT = "missing_object"
    SIZE_MISMATCH = "size_mismatch"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    BATCH_CRC_ERROR = "batch_crc_error"
    ORPHAN_OBJECT = "orphan_object"
    STUCK_COPY_STARTED = "stuck_copy_started"
    STUCK_DELETE_STARTED = "stuck_delete_started"
    LINEAGE_GAP = "lineage_gap"
    STALE_MULTIPART_UPLOAD = "stale_multipart_upload"


_STUCK = {
    _S.COPY_SEGMENT_STARTED: ProblemKind.STUCK_COPY_STARTED,
    _S.DELETE_SEGMENT_STARTED: ProblemKind.STUCK_DELETE_STARTED,
}

GARBAGE = frozenset(
    {
        ProblemKind.ORPHAN_OBJECT,
        ProblemKind.STALE_MULTIPART_UPLOAD,
        ProblemKind.STUCK_COPY_STARTED,
        ProblemKind.STUCK_DELETE_STARTED,
    }
)
"""The kinds ``rlmm gc`` repairs: garbage, never data (the rest needs an operator)."""


@dataclass(frozen=True)
class Problem:
    """One finding; ``segment`` is set for the segment kinds (gc needs the metadata)."""

    kind: ProblemKind
    topic: str | None
    partition: int | None
    detail: str
    segment_id: str | None = None
    object_name: str | None = None
    upload_id: str | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    segment: RemoteLogSegmentMetadata | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind.value,
            "topic": self.topic,
            "partition": self.partition,
        }
        for name in ("segment_id", "object_name", "upload_id", "first_offset", "last_offset"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["detail"] = self.detail
        return out


@dataclass
class VerifyReport:
    problems: list[Problem]
    deep: bool
    safety_window_s: float
    segments_checked: int = 0
    objects_checked: int = 0
    bytes_read: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "deep": self.deep,
            "safety_window_s": self.safety_window_s,
            "segments_checked": self.segments_checked,
            "objects_checked": self.objects_checked,
            "bytes_read": self.bytes_read,
            "problems": [p.to_dict() for p in self.problems],
        }


Progress = Callable[[int, int], None]


def _segment_problem(
    kind: ProblemKind, m: RemoteLogSegmentMetadata, detail: str, name: str | None = None
) -> Problem:
    tp = m.topic_id_partition
    return Problem(
        kind,
        tp.topic,
        tp.partition,
        detail,
        segment_id=kafka_uuid_to_str(m.remote_log_segment_id.id),
        object_name=name,
        segment=m,
    )


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expected_objects(m: RemoteLogSegmentMetadata) -> dict[ObjectKind, ObjectChecksum | None]:
    """The objects a finished copy of ``m`` must have, with what the manifest recorded."""
    manifest = SegmentManifest.of(m)
    if manifest is not None:
        return dict(manifest.objects)
    kinds = [k for k in OBJECT_KINDS if k in _MANDATORY or not m.txn_index_empty]
    return {k: None for k in kinds}


class _Verifier:
    def __init__(
        self,
        view: MetadataView,
        rsm: RemoteStorageManager,
        deep: bool,
        topic: str | None,
        window_s: float,
        now_ms: int,
        progress: Progress | None,
    ) -> None:
        self.view = view
        self.rsm = rsm
        self.deep = deep
        self.topic = topic
        self.cutoff_ms = now_ms - int(window_s * 1000)
        self.progress = progress
        self.report = VerifyReport([], deep, window_s)

    def run(self) -> VerifyReport:
        listing = {o.name: o for o in self.rsm.list_objects()}
        tps = [tp for tp in self.view.topic_partitions() if self.topic in (None, tp.topic)]
        segments = [m for tp in tps for m in self.view.segments(tp)]
        live = {
            kafka_uuid_to_str(m.remote_log_segment_id.id)
            for tp in self.view.topic_partitions()
            for m in self.view.segments(tp)
        }
        for i, m in enumerate(segments):
            self.segment(m, listing)
            if self.progress is not None:
                self.progress(i + 1, len(segments))
        self.report.segments_checked = len(segments)
        for tp in tps:
            for gap in self.view.gaps(tp):
                self.report.problems.append(
                    Problem(
                        ProblemKind.LINEAGE_GAP,
                        tp.topic,
                        tp.partition,
                        f"offsets {gap.first_offset}..{gap.last_offset} are in no lineage segment",
                        first_offset=gap.first_offset,
                        last_offset=gap.last_offset,
                    )
                )
        self.orphans(listing, live)
        self.uploads()
        return self.report

    def segment(self, m: RemoteLogSegmentMetadata, listing: dict[str, RemoteObject]) -> None:
        stuck = _STUCK.get(m.state)
        if stuck is not None:
            # Objects of a copy or delete in progress are not checked: they come and go.
            if m.event_timestamp_ms < self.cutoff_ms:
                since = f"{m.state.name} since {_utc(m.event_timestamp_ms)}"
                self.report.problems.append(_segment_problem(stuck, m, since))
            return
        if m.state != _S.COPY_SEGMENT_FINISHED:
            return
        for kind, recorded in expected_objects(m).items():
            self.check_object(m, kind, recorded, listing)

    def check_object(
        self,
        m: RemoteLogSegmentMetadata,
        kind: ObjectKind,
        recorded: ObjectChecksum | None,
        listing: dict[str, RemoteObject],
    ) -> None:
        name = object_name(m, kind)
        self.report.objects_checked += 1
        stored = listing.get(name)
        if stored is None:
            self.report.problems.append(
                _segment_problem(ProblemKind.MISSING_OBJECT, m, "not in remote storage", name)
            )
            return
        expected_size = (
            recorded.size
            if recorded is not None
            else (m.segment_size_in_bytes if kind is None else None)
        )
        if expected_size is not None and stored.size != expected_size:
            self.report.problems.append(
                _segment_problem(
                    ProblemKind.SIZE_MISMATCH,
                    m,
                    f"stored {stored.size} bytes, recorded {expected_size}",
                    name,
                )
            )
            return
        if self.deep:
            self.read_deeply(m, kind, recorded, name)

    def read_deeply(
        self,
        m: RemoteLogSegmentMetadata,
        kind: ObjectKind,
        recorded: ObjectChecksum | None,
        name: str,
    ) -> None:
        # One streaming pass per object (segments are up to a GiB): the CRC-32C of every
        # byte, and for the log object each batch's own CRC on the way.
        with self.rsm.open_object(name) as stream:
            reading = _Checksummed(stream)
            if kind is None:
                reader = RecordBatchReader(
                    cast(BinaryIO, reading),
                    name=name,
                    verify_crc=True,
                    strict=False,
                    allow_truncated_tail=False,
                )
                for _ in reader:
                    pass
                error: SegmentFormatError | None = reader.error
                if error is not None:
                    detail = str(error).removeprefix(f"{name}: ")  # the object has its column
                    self.report.problems.append(
                        _segment_problem(ProblemKind.BATCH_CRC_ERROR, m, detail, name)
                    )
            reading.drain()
        self.report.bytes_read += reading.size
        if recorded is not None and reading.crc != recorded.crc32c:
            self.report.problems.append(
                _segment_problem(
                    ProblemKind.CHECKSUM_MISMATCH,
                    m,
                    f"CRC-32C {reading.crc:08x}, recorded {recorded.crc32c:08x}",
                    name,
                )
            )

    def orphans(self, listing: dict[str, RemoteObject], live: set[str]) -> None:
        for obj in listing.values():
            parsed = parse_object_name(obj.name)
            if parsed is None or self.topic not in (None, parsed.topic):
                continue  # not ours to judge: a name outside rlmm's layout is left alone
            if obj.last_modified_ms >= self.cutoff_ms:
                continue
            if parsed.segment_id in live and not parsed.temporary:
                continue
            why = (
                "temp file of a copy that never published"
                if parsed.temporary
                else "no live segment has this segment id"
            )
            self.report.problems.append(
                Problem(
                    ProblemKind.ORPHAN_OBJECT,
                    parsed.topic,
                    parsed.partition,
                    f"{why} ({obj.size} bytes, last modified {_utc(obj.last_modified_ms)})",
                    segment_id=parsed.segment_id,
                    object_name=obj.name,
                )
            )

    def uploads(self) -> None:
        for upload in self.rsm.list_multipart_uploads():
            parsed = parse_object_name(upload.name)
            topic = parsed.topic if parsed is not None else None
            if self.topic not in (None, topic) or upload.initiated_ms >= self.cutoff_ms:
                continue
            self.report.problems.append(
                Problem(
                    ProblemKind.STALE_MULTIPART_UPLOAD,
                    topic,
                    parsed.partition if parsed is not None else None,
                    f"open since {_utc(upload.initiated_ms)}",
                    segment_id=parsed.segment_id if parsed is not None else None,
                    object_name=upload.name,
                    upload_id=upload.upload_id,
                )
            )


class _Checksummed(io.RawIOBase):
    """Passes a stream's bytes through, keeping their count and CRC-32C."""

    def __init__(self, stream: BinaryIO) -> None:
        super().__init__()
        self._stream = stream
        self.crc = 0
        self.size = 0

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        # The batch reader seeks to its start position once; only "stay at 0" is real.
        if offset == 0 and whence == io.SEEK_SET and self.size == 0:
            return 0
        raise io.UnsupportedOperation("a checksummed stream only reads forward")

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._stream.read(len(view))
        n = len(data)
        view[:n] = data
        self.crc = crc32c_of(data, self.crc)
        self.size += n
        return n

    def drain(self) -> None:
        chunk = bytearray(_READ_CHUNK)
        while self.readinto(chunk):
            pass


def verify(
    view: MetadataView,
    rsm: RemoteStorageManager,
    *,
    deep: bool = False,
    topic: str | None = None,
    safety_window_s: float = DEFAULT_SAFETY_WINDOW_S,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check the metadata of ``view`` against the objects of ``rsm`` (see the module doc)."""
    if safety_window_s < 0:
        raise ValueError(f"safety window {safety_window_s}s < 0")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return _Verifier(view, rsm, deep, topic, safety_window_s, now, progress).run()


__all__ = [
    "DEFAULT_SAFETY_WINDOW_S",
    "GARBAGE",
    "Problem",
    "ProblemKind",
    "VerifyReport",
    "expected_objects",
    "verify",
]
