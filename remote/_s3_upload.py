"""Write-once upload of one segment copy to S3: parallel PUTs and parallel multipart parts.

Invariants:
- every object is written with ``IfNoneMatch='*'`` (PutObject and
  CompleteMultipartUpload), carries its CRC-32C in the ``x-amz-checksum-crc32c``
  header (S3 verifies it) and in the ``crc32c`` user metadata (we verify on fetch);
- a 412 means the key exists: identical size + stored CRC is a successful retry,
  anything else is RemoteObjectExistsError, and the existing object is never touched;
- an S3 call that still fails as unavailable after the client's own retries pauses
  every copy of the store (``StorePause``: nothing is sent until a cheap probe is
  answered) and is tried again after the pause, for up to ``copy_retry_s`` from its
  first failure, by the same task: the copy keeps its objects that landed and its parts
  that were acknowledged, so a retried copy never uploads a byte twice (a write-once
  412 on the retry is the earlier try having landed); ``stop`` cuts those waits short;
- a copy given a ``cancelled`` event (its caller can give it up) counts against
  ``copy_retry_s`` only the pauses its own refusals began and S3 ended by answering
  the probe (the store answers others, not this copy), not the store's outages or the
  pauses of other copies: it waits for S3 as long as a storm lasts, and fails at its
  next wait once the event is set; a copy without one (Kafka's broker, through rlmm
  serve, cannot cancel it) counts every second from its first failure;
- when the copy fails, every object it created (or may have created: a write whose
  outcome is unknown after a 5xx or timeout) is deleted and every multipart upload it
  opened is aborted before the error propagates; objects found already present and
  identical on the first attempt are left alone: they are not this call's to remove.
The calling thread coordinates; only leaf tasks (one PUT, one part) run on the pool,
so copies never deadlock on the shared pool.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote._s3_client import S3Calls
from remote.errors import (
    InvalidSegmentDataError,
    RemoteObjectExistsError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageUnavailableError,
)
from remote.manifest import ObjectChecksum, SegmentManifest, crc32c_of
from remote.naming import OBJECT_KINDS, ObjectKind
from remote.segment_data import smallest_timestamp
from remote.storage import LogSegmentData
from remote.store_pause import StorePause

log = logging.getLogger("remote.s3")

CRC_METADATA_KEY = "crc32c"
"""User metadata (``x-amz-meta-crc32c``) holding the object's CRC-32C as 8 hex digits."""

MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PARTS = 10_000
_READ_CHUNK = 8 * 1024 * 1024


def crc_header(crc: int) -> str:
    """S3's ``x-amz-checksum-crc32c`` form: base64 of the 4 big-endian bytes."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")


def crc_metadata(crc: int) -> str:
    return f"{crc:08x}"


class _CopyAbortedError(RemoteStorageError):
    """A part skipped because another task of the same copy already failed."""


@dataclass(eq=False)  # identity: the uploader's list of live copies removes this one
class _CopyState:
    """What one copy has done so far, shared by its tasks (guarded by ``lock``)."""

    created: list[str] = field(default_factory=list)
    uploads: dict[str, str] = field(default_factory=dict)  # upload id -> key
    failed: threading.Event = field(default_factory=threading.Event)
    # Set by the caller that gave the copy up; None: it cannot (every wait is bounded).
    cancelled: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def given_up(self) -> bool:
        """Another task of the copy failed, or its caller cancelled it."""
        return self.failed.is_set() or self.was_cancelled()

    def was_cancelled(self) -> bool:
        """The copy's caller gave it up."""
        return self.cancelled is not None and self.cancelled.is_set()

    def add_created(self, key: str) -> None:
        with self.lock:
            # A call retried after an unknown outcome names its key again.
            if key not in self.created:
                self.created.append(key)


@dataclass
class _Tries:
    """One call's tries and the seconds they count against ``copy_retry_s``."""

    cancellable: bool
    count: int = 0
    error: RemoteStorageUnavailableError | None = None
    first: float | None = None  # the first failure or wait
    own: float = 0.0  # a cancellable copy's: the pauses it began that S3 ended answering
    began: tuple[int, float] | None = None  # (number, start) of the pause it just began

    def spent(self) -> float:
        if self.cancellable:
            return self.own
        return 0.0 if self.first is None else time.monotonic() - self.first

    def waiting(self) -> None:
        self.first = time.monotonic() if self.first is None else self.first

    def refused(self, error: RemoteStorageUnavailableError, began: bool, number: int) -> None:
        self.waiting()
        self.error = error
        self.began = (number, time.monotonic()) if began else None

    def waited(self, answered: bool, pauses_started: int) -> None:
        """After a wait: the pause this call's refusal began counts when no other
        followed it (its probe was answered: the store answers, not to this call)."""
        if self.began is not None and answered and pauses_started == self.began[0]:
            self.own += time.monotonic() - self.began[1]
        self.began = None


@dataclass
class _Multipart:
    """One multipart upload in flight: its file, upload id and part futures."""

    key: str
    size: int
    fd: int
    crc: int = 0
    upload_id: str = ""
    parts: list[cf.Future[dict[str, Any]]] = field(default_factory=list)
    closed: bool = False

    def stop(self) -> None:
        """Cancel queued parts, wait for running ones, close the file (idempotent)."""
        for f in self.parts:
            f.cancel()
        cf.wait(self.parts)
        if not self.closed:
            self.closed = True
            os.close(self.fd)


@dataclass(frozen=True, slots=True)
class UploadSettings:
    multipart_threshold: int
    part_size: int
    object_args: dict[str, Any]  # SSE headers for PutObject / CreateMultipartUpload
    # How long one call is tried again once the client's retries ran out (0: never).
    copy_retry_s: float = 0.0


class SegmentUploader:
    """Uploads the objects of segment copies through ``calls`` on ``pool``."""

    def __init__(
        self,
        calls: S3Calls,
        pool: Callable[[], cf.Executor],
        settings: UploadSettings,
        probe: Callable[[], None] = lambda: None,
    ) -> None:
        """``probe``: a cheap request that tells whether S3 answers again (after a pause)."""
        self._calls = calls
        self._pool = pool
        self._settings = settings
        self._stopping = threading.Event()
        self._live: list[_CopyState] = []
        self._live_lock = threading.Lock()
        self.pause = StorePause(probe)

    def stop(self) -> None:
        """Fail every copy in flight at its next wait between tries, and every later
        one at its first unavailable call (the store is closing)."""
        self._stopping.set()
        self.pause.close()
        with self._live_lock:
            live = list(self._live)
        for state in live:
            state.failed.set()

    def upload(
        self,
        segment_data: LogSegmentData,
        key_of: Callable[[ObjectKind], str],
        cancelled: threading.Event | None = None,
    ) -> SegmentManifest:
        """Upload every object of ``segment_data``; return the manifest of what was stored.
        ``cancelled``: see the module's invariants."""
        plan: list[tuple[ObjectKind, str, Path | bytes, int]] = []
        for kind in OBJECT_KINDS:
            source = segment_data.source(kind)
            if source is None:
                continue
            plan.append((kind, key_of(kind), source, _size_of(source)))
        state = _CopyState(cancelled=cancelled)
        pool = self._pool()
        with self._live_lock:
            self._live.append(state)
        try:
            return self._upload(state, pool, segment_data, plan)
        finally:
            with self._live_lock:
                self._live.remove(state)

    def _upload(
        self,
        state: _CopyState,
        pool: cf.Executor,
        segment_data: LogSegmentData,
        plan: list[tuple[ObjectKind, str, Path | bytes, int]],
    ) -> SegmentManifest:
        large: list[tuple[ObjectKind, _Multipart]] = []
        small: list[tuple[ObjectKind, cf.Future[ObjectChecksum]]] = []
        objects: dict[ObjectKind, ObjectChecksum] = {}
        try:
            # Large objects first: their parts are the critical path, and the small PUTs
            # would otherwise compete with the CRC pass that precedes the upload's creation.
            for kind, key, source, size in plan:
                if isinstance(source, Path) and size > self._settings.multipart_threshold:
                    large.append((kind, self._start_multipart(state, pool, key, source, size)))
            for kind, key, source, size in plan:
                if isinstance(source, bytes) or size <= self._settings.multipart_threshold:
                    small.append((kind, pool.submit(self._put, state, key, source)))
            # While the uploads run: the caller's smallest timestamp, or a scan for it.
            smallest = smallest_timestamp(segment_data)
            for kind, multipart in large:
                objects[kind] = self._finish_multipart(state, multipart)
            for kind, future in small:
                objects[kind] = future.result()
        except BaseException as e:
            state.failed.set()
            for _, future in small:
                future.cancel()
            for _, multipart in large:
                multipart.stop()
            cf.wait([f for _, f in small])
            self._cleanup(state)
            if isinstance(e, _CopyAbortedError):
                # Parts stopped because a PUT failed: report that PUT's error instead.
                for _, future in small:
                    cause = None if future.cancelled() else future.exception()
                    if cause is not None and not isinstance(cause, _CopyAbortedError):
                        raise cause from None
            raise
        return SegmentManifest(objects, smallest)

    # --- one call, tried again ---------------------------------------------------------

    def _call(
        self, state: _CopyState, operation: str, key: str, *, creates: bool = False, **params: Any
    ) -> dict[str, Any]:
        """``S3Calls.call``, tried again while S3 stays unavailable, for up to
        ``copy_retry_s`` (counted as the module's invariants say). ``creates``: a failed
        try may have written ``key`` (its outcome is unknown), which makes the key this
        copy's to clean up should the copy fail. A refusal pauses the store's every
        copy (``StorePause``); the tries wait out the pause, and send nothing meanwhile."""
        budget = self._settings.copy_retry_s
        tries = _Tries(state.cancelled is not None)
        while True:
            if budget > 0 and self.pause.paused:
                tries.waiting()
                answered = self.pause.turn(
                    math.inf, lambda: self._given_up(state) or tries.spent() >= budget
                )
                tries.waited(answered, self.pause.pauses_started)
                if not answered and state.was_cancelled():
                    raise _CopyAbortedError(
                        f"s3 {operation} {self._url(key)} not sent: the copy was cancelled"
                    )
                if not answered:
                    raise tries.error or RemoteStorageUnavailableError(
                        f"s3 {operation} {self._url(key)} not sent: the store's copies stayed"
                        f" paused for copy_retry_s = {budget:g} s, S3 having refused"
                        f" {self.pause.cause}"
                    )
            if tries.error is not None and tries.spent() >= budget:
                raise tries.error
            tries.count += 1
            try:
                response = self._calls.call(operation, key, **params)
            except RemoteStorageUnavailableError as e:
                if creates:
                    state.add_created(key)
                if budget <= 0 or self._given_up(state):
                    if state.was_cancelled():
                        # the caller's cancellation is why the copy stops, not S3
                        raise _CopyAbortedError(
                            f"s3 {operation} {self._url(key)} stopped: the copy was"
                            f" cancelled (S3 had refused it: {e})"
                        ) from e
                    raise
                tries.refused(e, self.pause.refused(e), self.pause.pauses_started)
                log.info(
                    "s3 %s %s: %s; trying again after the store's pause of %.1f s (try %d;"
                    " what this copy already stored stays)",
                    operation, self._url(key), e, self.pause.remaining_s(), tries.count + 1,
                )  # fmt: skip
            else:
                self.pause.answered()
                return response

    def _given_up(self, state: _CopyState) -> bool:
        """Another task of the copy failed, its caller gave it up, or the store is closing."""
        return state.given_up() or self._stopping.is_set()

    # --- single PUT ----------------------------------------------------------------------

    def _put(self, state: _CopyState, key: str, source: Path | bytes) -> ObjectChecksum:
        if state.given_up():
            raise _CopyAbortedError(f"PUT of {self._url(key)} skipped: copy failed or cancelled")
        try:
            data = source if isinstance(source, bytes) else _read_file(source)
            checksum = ObjectChecksum(len(data), crc32c_of(data))
            try:
                self._call(
                    state,
                    "put_object",
                    key,
                    creates=True,
                    Body=data,
                    ContentLength=len(data),
                    ChecksumCRC32C=crc_header(checksum.crc32c),
                    Metadata={CRC_METADATA_KEY: crc_metadata(checksum.crc32c)},
                    IfNoneMatch="*",
                    **self._settings.object_args,
                )
                state.add_created(key)
            except RemoteObjectExistsError as e:
                self._check_identical(state, key, checksum)
                if _was_retried(e):
                    # The 412 answered a retry: our own earlier attempt wrote the object
                    # (its response was lost), so it is this copy's to clean up.
                    state.add_created(key)
            except RemoteStorageUnavailableError:
                # Outcome unknown (5xx or timeout after the body was sent): the object may
                # exist, and if so it is ours; cleanup deletes it (absent keys are fine).
                state.add_created(key)
                raise
            return checksum
        except BaseException:
            state.failed.set()
            raise

    def _check_identical(self, state: _CopyState, key: str, checksum: ObjectChecksum) -> None:
        # Tried again like the PUT: a refused HEAD must not fail a copy that landed.
        head = self._call(state, "head_object", key)
        size = int(head.get("ContentLength", -1))
        stored = head.get("Metadata", {}).get(CRC_METADATA_KEY)
        if size == checksum.size and stored == crc_metadata(checksum.crc32c):
            log.debug("%s exists with identical content: write-once retry ok", self._url(key))
            return
        raise RemoteObjectExistsError(
            f"{self._url(key)} already exists with different content (stored: {size} bytes, "
            f"crc32c {stored}; this copy: {checksum.size} bytes, "
            f"crc32c {crc_metadata(checksum.crc32c)})"
        )

    # --- multipart -----------------------------------------------------------------------

    def _start_multipart(
        self, state: _CopyState, pool: cf.Executor, key: str, path: Path, size: int
    ) -> _Multipart:
        """CRC pass, CreateMultipartUpload, and every part submitted to the pool."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise InvalidSegmentDataError(f"cannot read segment file {path}: {e}") from e
        multipart = _Multipart(key, size, fd)
        try:
            # The whole-object CRC must be known when the upload is created (it goes into
            # the object's metadata), hence one read pass first (page-cache fast).
            multipart.crc = _crc_of_fd(fd, path, size)
            multipart.upload_id = upload_id = self._call(
                state,
                "create_multipart_upload",
                key,
                ChecksumAlgorithm="CRC32C",
                Metadata={CRC_METADATA_KEY: crc_metadata(multipart.crc)},
                **self._settings.object_args,
            )["UploadId"]
            with state.lock:
                state.uploads[upload_id] = key
            part_size = max(self._settings.part_size, math.ceil(size / MAX_PARTS))
            for number, offset in enumerate(range(0, size, part_size), start=1):
                length = min(part_size, size - offset)
                multipart.parts.append(
                    pool.submit(
                        self._upload_part, state, key, upload_id, fd, path, number, offset, length
                    )
                )
        except BaseException:
            state.failed.set()
            multipart.stop()
            raise
        return multipart

    def _finish_multipart(self, state: _CopyState, multipart: _Multipart) -> ObjectChecksum:
        """Wait for the parts, then CompleteMultipartUpload (write-once)."""
        key, parts, upload_id = multipart.key, multipart.parts, multipart.upload_id
        try:
            # Raise the first failure in part order, after all parts have stopped.
            cf.wait(parts, return_when=cf.FIRST_EXCEPTION)
            if any(f.done() and not f.cancelled() and f.exception() for f in parts):
                state.failed.set()
                multipart.stop()
                for f in parts:
                    error = None if f.cancelled() else f.exception()
                    if error is not None and not isinstance(error, _CopyAbortedError):
                        raise error
                # every part stopped without an error of its own: say why they stopped
                why = "the copy was cancelled" if state.was_cancelled() else "another object failed"
                raise _CopyAbortedError(f"multipart upload of {self._url(key)} stopped: {why}")
            completed = [f.result() for f in parts]
        finally:
            multipart.stop()
        checksum = ObjectChecksum(multipart.size, multipart.crc)
        try:
            self._call(
                state,
                "complete_multipart_upload",
                key,
                creates=True,
                UploadId=upload_id,
                MultipartUpload={"Parts": completed},
                IfNoneMatch="*",
            )
            state.add_created(key)
        except RemoteObjectExistsError as e:
            self._abort(upload_id, key)
            self._check_identical(state, key, checksum)
            if _was_retried(e):
                state.add_created(key)
        except RemoteStorageUnavailableError:
            state.add_created(key)  # outcome unknown, as for a PUT
            raise
        except RemoteResourceNotFoundError:
            # NoSuchUpload on a retried complete: the first attempt completed the upload
            # and only its response was lost. The object must now be ours, byte for byte.
            self._check_identical(state, key, checksum)
            state.add_created(key)
        with state.lock:
            state.uploads.pop(upload_id, None)
        return checksum

    def _upload_part(
        self,
        state: _CopyState,
        key: str,
        upload_id: str,
        fd: int,
        path: Path,
        number: int,
        offset: int,
        length: int,
    ) -> dict[str, Any]:
        if state.given_up():
            raise _CopyAbortedError(
                f"part {number} of {self._url(key)} skipped: copy failed or cancelled"
            )
        try:
            data = os.pread(fd, length, offset)
            if len(data) != length:
                raise InvalidSegmentDataError(
                    f"segment file {path} shrank during upload: read {len(data)} of {length} "
                    f"bytes at position {offset}"
                )
            checksum = crc_header(crc32c_of(data))
            response = self._call(
                state,
                "upload_part",
                key,
                UploadId=upload_id,
                PartNumber=number,
                Body=data,
                ContentLength=length,
                ChecksumCRC32C=checksum,
            )
            return {"PartNumber": number, "ETag": response["ETag"], "ChecksumCRC32C": checksum}
        except BaseException:
            state.failed.set()
            raise

    # --- cleanup -------------------------------------------------------------------------

    def _abort(self, upload_id: str, key: str) -> None:
        try:
            self._calls.call("abort_multipart_upload", key, UploadId=upload_id)
        except RemoteStorageError as e:
            log.warning("could not abort multipart upload %s of %s: %s", upload_id, key, e)

    def _cleanup(self, state: _CopyState) -> None:
        with state.lock:
            uploads = dict(state.uploads)
            created = list(state.created)
        for upload_id, key in uploads.items():
            self._abort(upload_id, key)
        if created:
            try:
                self._calls.delete_keys(created)
            except RemoteStorageError as e:
                log.warning("could not remove partial copy %s: %s", created, e)
        log.info(
            "failed copy cleaned up: %d object(s) deleted, %d multipart upload(s) aborted",
            len(created),
            len(uploads),
        )

    def _url(self, key: str) -> str:
        return self._calls.url(key)


def _was_retried(error: BaseException) -> bool:
    cause = error.__cause__
    response = getattr(cause, "response", None) or {}
    return bool(response.get("ResponseMetadata", {}).get("RetryAttempts", 0))


def _size_of(source: Path | bytes) -> int:
    if isinstance(source, bytes):
        return len(source)
    try:
        return source.stat().st_size
    except OSError as e:
        raise InvalidSegmentDataError(f"cannot read segment file {source}: {e}") from e


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise InvalidSegmentDataError(f"cannot read segment file {path}: {e}") from e


def _crc_of_fd(fd: int, path: Path, size: int) -> int:
    crc = 0
    offset = 0
    while offset < size:
        try:
            chunk = os.pread(fd, min(_READ_CHUNK, size - offset), offset)
        except OSError as e:
            raise InvalidSegmentDataError(f"cannot read segment file {path}: {e}") from e
        if not chunk:
            raise InvalidSegmentDataError(
                f"segment file {path} shrank during upload: ended at {offset} of {size} bytes"
            )
        crc = crc32c_of(chunk, crc)
        offset += len(chunk)
    return crc


__all__ = ["CRC_METADATA_KEY", "MIN_PART_SIZE", "SegmentUploader", "UploadSettings"]
