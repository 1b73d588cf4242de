"""Verification of remote storage: the metadata against the stored objects, both ways.

The library side of ``rlmm verify``. From a read-only MetadataView and the inventory
of a RemoteLayout (rlmm's own, Kafka's LocalTieredStorage, Aiven's S3 plugin) it
finds, each naming its segment id or object:

- ``missing_object``: an object of a COPY_SEGMENT_FINISHED segment is not stored;
- ``size_mismatch``: a stored object's size differs from the manifest (or, without
  one, the log object's size from ``segment_size_in_bytes``);
- ``checksum_mismatch`` (deep): its CRC-32C differs from the manifest's;
- ``batch_crc_error`` (deep): a record batch of the log data fails its own CRC;
- ``corrupt_object``: an object that is there but unreadable in the layout's format
  (a manifest that is not JSON, a chunk index that does not match the object, a
  truncated or undecodable chunk);
- ``orphan_object``: an object that is none of a live segment's own objects (no live
  segment has its id, or its name is not one its segment's copy has), or a temp file
  of a copy that never published, older than the safety window;
- ``stuck_copy_started`` / ``stuck_delete_started``: a segment left in a STARTED state
  for longer than the safety window;
- ``lineage_gap``: offsets missing between consecutive segments of the lineage;
- ``stale_multipart_upload``: an open multipart upload older than the window (S3).

Invariant: nothing here writes; anything younger than the safety window is never a
problem (a copy or delete may be in flight), so a problem found is one the metadata
and the objects prove. Segments are checked by a pool of threads (object stores answer
each GET after a round trip: one at a time, a deep verify of thousands of objects
took minutes), and their findings are reported in the same order as one at a time.
"""

from __future__ import annotations

import copy
import enum
import io
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

from remote.errors import RemoteIntegrityError, SegmentFormatError
from remote.layouts import RemoteLayout, SegmentObject
from remote.manifest import crc32c_of
from remote.registry import check_layout_matches
from remote.segments.batch import RecordBatchReader
from remote.storage import RemoteObject
from remote.topic_configs import SUBDIR as _TOPIC_CONFIGS_SUBDIR
from rlmm.archive import MetadataView
from rlmm.errors import RemoteResourceNotFoundError, RemoteStorageError
from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState, kafka_uuid_to_str
from snapshot.store import SUBPREFIX as _SNAPSHOTS_SUBDIR

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

DEFAULT_SAFETY_WINDOW_S = 3600.0
DEFAULT_WORKERS = 8  # segments checked at once
_T = TypeVar("_T")
_R = TypeVar("_R")
_S = RemoteLogSegmentState
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
    CORRUPT_OBJECT = "corrupt_object"


REMEDIES: dict[ProblemKind, str] = {
    ProblemKind.MISSING_OBJECT: (
        "restore the object (from a backup, or the broker's log dir if it still holds the"
        " segment); until then readers with failOnDataLoss=false skip the segment"
    ),
    ProblemKind.SIZE_MISMATCH: (
        "the object was truncated or replaced: restore it as for missing_object"
        " (verify --deep shows which batches are still intact)"
    ),
    ProblemKind.CHECKSUM_MISMATCH: "its bytes changed since they were written: restore it",
    ProblemKind.BATCH_CRC_ERROR: (
        "a record batch is corrupt: restore the object; readers with failOnDataLoss=false"
        " skip the batch"
    ),
    ProblemKind.CORRUPT_OBJECT: (
        "unreadable in its layout's format: check that remote.type is the brokers' plugin,"
        " then restore the object"
    ),
    ProblemKind.ORPHAN_OBJECT: "garbage: rlmm gc --apply deletes it",
    ProblemKind.STUCK_COPY_STARTED: (
        "garbage of a failed copy: rlmm gc --apply deletes its objects and marks it"
        " DELETE_SEGMENT_FINISHED"
    ),
    ProblemKind.STUCK_DELETE_STARTED: ("a delete that never finished: rlmm gc --apply finishes it"),
    ProblemKind.LINEAGE_GAP: (
        "expected after an unclean leader election; otherwise segments in that range"
        " were never copied: check the broker still has them and the offloader's log"
    ),
    ProblemKind.STALE_MULTIPART_UPLOAD: "garbage: rlmm gc --apply aborts the upload",
}
"""One line per problem kind: what an operator does about it."""

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
        out["remedy"] = REMEDIES[self.kind]
        return out


@dataclass
class VerifyReport:
    problems: list[Problem]
    deep: bool
    safety_window_s: float
    segments_checked: int = 0
    objects_checked: int = 0
    bytes_read: int = 0
    skipped_young: int = 0  # objects and uploads younger than the safety window
    skipped_outside_layout: int = 0  # stored names not in the layout's pattern

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
            "skipped_young": self.skipped_young,
            "skipped_outside_layout": self.skipped_outside_layout,
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


class _Verifier:
    def __init__(
        self,
        view: MetadataView,
        layout: RemoteLayout,
        deep: bool,
        topic: str | None,
        window_s: float,
        now_ms: int,
        progress: Progress | None,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.workers = workers
        self.view = view
        self.layout = layout
        self.deep = deep
        self.topic = topic
        self.cutoff_ms = now_ms - int(window_s * 1000)
        self.progress = progress
        self.report = VerifyReport([], deep, window_s)

    def run(self) -> VerifyReport:
        listing = {o.name: o for o in self.layout.list_objects()}
        check_layout_matches(self.layout, listing)
        tps = [tp for tp in self.view.topic_partitions() if self.topic in (None, tp.topic)]
        segments = [m for tp in tps for m in self.view.segments(tp)]
        every = [m for tp in self.view.topic_partitions() for m in self.view.segments(tp)]
        live = {kafka_uuid_to_str(m.remote_log_segment_id.id) for m in every}
        # An object is kept only as one of a live segment's own: the right segment id
        # under another start offset or name is read by no one (issue 28).
        expected = {name for m in every for name in self.layout.segment_object_names(m)}
        with ThreadPoolExecutor(self.workers, thread_name_prefix="rlmm-verify") as pool:
            checked = _in_order(
                pool, lambda m: self.checked(m, listing), segments, 4 * self.workers
            )
            for i, part in enumerate(checked):
                self.report.problems.extend(part.problems)
                self.report.objects_checked += part.objects_checked
                self.report.bytes_read += part.bytes_read
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
        self.orphans(listing, live, expected)
        self.uploads()
        return self.report

    def checked(
        self, m: RemoteLogSegmentMetadata, listing: dict[str, RemoteObject]
    ) -> VerifyReport:
        """The findings of one segment, in a report of their own (run in a pool thread)."""
        one = copy.copy(self)
        one.report = VerifyReport([], self.deep, self.report.safety_window_s)
        one.segment(m, listing)
        return one.report

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
        try:
            objects = self.layout.segment_objects(m)
        except RemoteResourceNotFoundError as e:
            name = getattr(e, "object_name", None) or self.layout.log_object_name(m)
            self.add(ProblemKind.MISSING_OBJECT, m, _one_line(e, name), name)
            return
        except RemoteIntegrityError as e:
            name = getattr(e, "object_name", None) or self.layout.log_object_name(m)
            self.add(ProblemKind.CORRUPT_OBJECT, m, _one_line(e, name), name)
            return
        complete = True
        for obj in objects:
            complete = self.check_object(m, obj, listing) and complete
        if self.deep and complete and not any(o.holds_log for o in objects):
            self.read_log_through_layout(m)

    def add(
        self, kind: ProblemKind, m: RemoteLogSegmentMetadata, detail: str, name: str | None
    ) -> None:
        self.report.problems.append(_segment_problem(kind, m, detail, name))

    def check_object(
        self, m: RemoteLogSegmentMetadata, obj: SegmentObject, listing: dict[str, RemoteObject]
    ) -> bool:
        """Presence and size (and, deep, content) of one object; False if it is unusable."""
        self.report.objects_checked += 1
        stored = listing.get(obj.name)
        if stored is None:
            if obj.required:
                self.add(ProblemKind.MISSING_OBJECT, m, "not in remote storage", obj.name)
            return not obj.required
        if obj.recorded_size is not None and stored.size != obj.recorded_size:
            self.add(
                ProblemKind.SIZE_MISMATCH,
                m,
                f"stored {stored.size} bytes, recorded {obj.recorded_size}",
                obj.name,
            )
            return False
        if self.deep and (obj.holds_log or obj.recorded_crc32c is not None):
            self.read_deeply(m, obj)
        return True

    def read_deeply(self, m: RemoteLogSegmentMetadata, obj: SegmentObject) -> None:
        # One streaming pass per object (segments are up to a GiB): the CRC-32C of every
        # byte, and for an object holding the log as it is, each batch's own CRC on the way.
        name = obj.name
        with self.layout.open_object(name) as stream:
            reading = _Checksummed(stream)
            if obj.holds_log:
                self.walk_batches(m, cast(BinaryIO, reading), name)
            reading.drain()
        self.report.bytes_read += reading.size
        if obj.recorded_crc32c is not None and reading.crc != obj.recorded_crc32c:
            self.add(
                ProblemKind.CHECKSUM_MISMATCH,
                m,
                f"CRC-32C {reading.crc:08x}, recorded {obj.recorded_crc32c:08x}",
                name,
            )

    def walk_batches(self, m: RemoteLogSegmentMetadata, stream: BinaryIO, name: str) -> None:
        reader = RecordBatchReader(
            stream, name=name, verify_crc=True, strict=False, allow_truncated_tail=False
        )
        for _ in reader:
            pass
        error: SegmentFormatError | None = reader.error
        if error is not None:
            detail = str(error).removeprefix(f"{name}: ")  # the object has its column
            self.add(ProblemKind.BATCH_CRC_ERROR, m, detail, name)

    def read_log_through_layout(self, m: RemoteLogSegmentMetadata) -> None:
        """Deep check of a log stored transformed (chunked, compressed, encrypted): read
        it back through the layout (every chunk checked there) and walk its batches."""
        name = self.layout.log_object_name(m)
        try:
            with self.layout.fetch_log_segment(m, 0) as stream:
                reading = _Checksummed(stream)
                self.walk_batches(m, cast(BinaryIO, reading), name)
                reading.drain()
        except RemoteIntegrityError as e:
            where = getattr(e, "object_name", None) or name
            self.add(ProblemKind.CORRUPT_OBJECT, m, _one_line(e, where), where)
            return
        except RemoteStorageError as e:
            self.add(ProblemKind.CORRUPT_OBJECT, m, _one_line(e, name), name)
            return
        self.report.bytes_read += reading.size
        if reading.size != m.segment_size_in_bytes:
            self.add(
                ProblemKind.SIZE_MISMATCH,
                m,
                f"log data is {reading.size} bytes, recorded {m.segment_size_in_bytes}",
                name,
            )

    def orphans(self, listing: dict[str, RemoteObject], live: set[str], expected: set[str]) -> None:
        for obj in listing.values():
            if obj.name.startswith((f"{_TOPIC_CONFIGS_SUBDIR}/", f"{_SNAPSHOTS_SUBDIR}/")):
                # rlmm's own, beside the segments: a topic's configs (for restore), the
                # metadata snapshots an S3 snapshot store keeps under the same prefix
                continue
            parsed = self.layout.parse_object_name(obj.name)
            if parsed is None:
                # Not ours to judge: a name outside the layout is left alone.
                self.report.skipped_outside_layout += 1
                continue
            if self.topic not in (None, parsed.topic):
                continue
            if obj.last_modified_ms >= self.cutoff_ms:
                self.report.skipped_young += 1
                continue
            if parsed.temporary:
                why = "temp file of a copy that never published"
            elif parsed.segment_id not in live:
                why = "no live segment has this segment id"
            elif obj.name not in expected:
                why = "its segment id is live, but it is none of that segment's objects"
            else:
                continue
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
        for upload in self.layout.list_multipart_uploads():
            parsed = self.layout.parse_object_name(upload.name)
            topic = parsed.topic if parsed is not None else None
            if self.topic not in (None, topic):
                continue
            if upload.initiated_ms >= self.cutoff_ms:
                self.report.skipped_young += 1
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


def _one_line(e: Exception, name: str) -> str:
    """The error's first line, without the object name it starts with (it has a column)."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text.removeprefix(f"{name}: ")


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

    def readinto(self, buffer: WriteableBuffer) -> int:
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


def _in_order(
    pool: ThreadPoolExecutor, fn: Callable[[_T], _R], items: Iterable[_T], window: int
) -> Iterator[_R]:
    """``fn`` of each item, computed ``window`` at a time by ``pool``, in item order; on
    an error (or an early stop) the ones not started are cancelled."""
    pending: deque[Future[_R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


def verify(
    view: MetadataView,
    layout: RemoteLayout,
    *,
    deep: bool = False,
    topic: str | None = None,
    safety_window_s: float = DEFAULT_SAFETY_WINDOW_S,
    now_ms: int | None = None,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> VerifyReport:
    """Check the metadata of ``view`` against the objects of ``layout`` (see the module
    doc), ``workers`` segments at once."""
    if safety_window_s < 0:
        raise ValueError(f"safety window {safety_window_s}s < 0")
    if workers < 1:
        raise ValueError(f"workers {workers} < 1")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return _Verifier(view, layout, deep, topic, safety_window_s, now, progress, workers).run()


__all__ = [
    "DEFAULT_SAFETY_WINDOW_S",
    "GARBAGE",
    "REMEDIES",
    "Problem",
    "ProblemKind",
    "VerifyReport",
    "verify",
]
