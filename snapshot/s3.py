"""S3SnapshotStore: snapshots as write-once objects in a bucket, shared between hosts.

Layout, beside the segment store's objects under the same prefix (a topic directory
is ``<topic>-<topic id>``, so it never collides with ``__snapshots``)::

    s3://<bucket>/<prefix>/__snapshots/<owner>/snapshot-<seq:020>.rlmm

One owner (a broker, ``broker-<id>``) writes its own sub-prefix; anyone may read
every owner's. A write lists the owner's keys, takes max seq + 1 and PUTs the whole
frame with ``IfNoneMatch='*'``: an object is never overwritten, so a reader sees a
complete snapshot or none (a 412 from a racing writer moves on to the next seq).
Only then are the owner's older objects pruned down to the newest ``keep`` valid
ones.

Invariant: the newest valid snapshot of an owner is never deleted; anything that
fails the frame's CRC-32C or length checks (a truncated upload by another tool, a
flipped bit, a newer format) is logged, counted in ``stats`` and skipped, so a
reader falls back to an older snapshot or a full replay. The boto3 client is given
by the caller (built from the remote storage settings); ``close()`` closes it only
if ``close_client`` is set.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from snapshot.errors import (
    SnapshotConfigError,
    SnapshotError,
    SnapshotStoreError,
)
from snapshot.format import Snapshot, encode_snapshot_parts, verify_snapshot
from snapshot.store import SUBPREFIX, SnapshotStore, SnapshotStoreStats

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

_OWNER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_NAME_RE = re.compile(r"^snapshot-(\d{20})\.rlmm$")
# Racing writers of one owner (a misconfiguration) get this many fresh seqs.
_WRITE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class _Entry:
    key: str
    owner: str
    seq: int
    size: int
    modified: datetime | None


def _clean_prefix(prefix: str) -> str:
    cleaned = prefix.strip("/")
    if "\x00" in cleaned or (cleaned and any(p in ("", ".", "..") for p in cleaned.split("/"))):
        raise SnapshotConfigError(f"snapshot store prefix {prefix!r} is not a clean path")
    return cleaned


def _status(e: ClientError) -> tuple[str, Any]:
    return (
        str(e.response.get("Error", {}).get("Code", "")),
        e.response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
    )


class S3SnapshotStore(SnapshotStore):
    """Keeps the newest ``keep`` valid snapshots of ``owner`` under ``prefix/__snapshots/``."""

    shared = True

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        prefix: str = "",
        *,
        owner: str = "broker-0",
        keep: int = 2,
        read_only: bool = False,
        close_client: bool = False,
        object_args: Mapping[str, Any] | None = None,
    ) -> None:
        if type(keep) is not int or keep < 1:
            raise SnapshotConfigError(f"snapshot store keep must be an int >= 1, got {keep!r}")
        if not isinstance(bucket, str) or not bucket:
            raise SnapshotConfigError("s3 snapshot store: 'bucket' must be a non-empty string")
        if not isinstance(owner, str) or not _OWNER_RE.match(owner):
            raise SnapshotConfigError(
                f"s3 snapshot store: owner {owner!r} must be 1-128 characters of "
                "letters, digits, '.', '_' or '-'"
            )
        self._client = client
        self.bucket = bucket
        self.prefix = _clean_prefix(prefix)
        self.owner = owner
        self.keep = keep
        self.read_only = read_only
        self.stats = SnapshotStoreStats()
        self._close_client = close_client
        # Server-side encryption of every snapshot object, as the segment store's.
        self._object_args = dict(object_args or {})
        self._closed = False
        self._lock = threading.Lock()
        self._last_seq = 0
        # Keys whose bytes this store wrote or checked: pruning need not download them.
        self._known_valid: set[str] = set()
        base = f"{self.prefix}/{SUBPREFIX}" if self.prefix else SUBPREFIX
        self._root = base + "/"
        self._own = f"{base}/{owner}/"

    def __repr__(self) -> str:
        return f"S3SnapshotStore({self.url(self._own)!r}, keep={self.keep})"

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def key_for(self, seq: int) -> str:
        return f"{self._own}snapshot-{seq:020d}.rlmm"

    # ----------------------------------------------------------------- requests

    def _call(self, operation: str, key: str | None, **params: Any) -> Any:
        if self._closed:
            raise SnapshotStoreError(f"{self!r} is closed")
        if key is not None:
            params["Key"] = key
        try:
            return getattr(self._client, operation)(Bucket=self.bucket, **params)
        except (ClientError, BotoCoreError) as e:
            where = self.url(key) if key is not None else self.url(params.get("Prefix", ""))
            error = SnapshotStoreError(f"s3 {operation} {where} failed: {e}", path=where)
            error.retriable = not isinstance(e, ClientError) or (_status(e)[1] or 0) >= 500
            raise error from e

    def _list(self, prefix: str) -> list[_Entry]:
        """Snapshot objects under ``prefix``, newest first (by owner-local seq, then time)."""
        entries: list[_Entry] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"Prefix": prefix}
            if token is not None:
                params["ContinuationToken"] = token
            response = self._call("list_objects_v2", None, **params)
            for item in response.get("Contents", []):
                key = str(item["Key"])
                owner, _, name = key[len(self._root) :].partition("/")
                match = _NAME_RE.match(name)
                if match is None or not owner:
                    continue
                entries.append(
                    _Entry(
                        key,
                        owner,
                        int(match.group(1)),
                        int(item.get("Size", 0)),
                        item.get("LastModified"),
                    )
                )
            if not response.get("IsTruncated"):
                break
            token = response.get("NextContinuationToken")
        entries.sort(key=lambda e: (e.modified is not None, e.modified, e.seq), reverse=True)
        return entries

    def _own_entries(self) -> list[_Entry]:
        return sorted(self._list(self._own), key=lambda e: e.seq, reverse=True)

    def kept(self) -> list[str]:
        return [self.url(e.key) for e in self._own_entries()]

    def kept_all_owners(self) -> list[str]:
        entries = self._list(self._root)
        # Per owner by seq, not by time: the order kept() gives for this owner.
        entries.sort(key=lambda e: (e.owner != self.owner, e.owner, -e.seq))
        return [self.url(e.key) for e in entries]

    def read(self, location: str) -> bytes:
        """GET the object at ``location`` (an ``s3://`` URL under this store's
        ``__snapshots/``, any owner's)."""
        base = self.url(self._root)
        owner, _, name = location.removeprefix(base).partition("/")
        match = _NAME_RE.match(name)
        if not location.startswith(base) or match is None or not owner:
            raise SnapshotStoreError(f"{location} is not a snapshot of {self!r}", path=location)
        if self._closed:
            raise SnapshotStoreError(f"{self!r} is closed")
        key = location[len(f"s3://{self.bucket}/") :]
        data = self._get(_Entry(key, owner, int(match.group(1)), 0, None))
        if data is None:
            raise SnapshotStoreError(f"snapshot {location} is gone", path=location)
        return data

    def owners(self) -> list[str]:
        """Every owner that has published a snapshot under this prefix."""
        return sorted({e.owner for e in self._list(self._root)})

    # ----------------------------------------------------------------- writing

    def write(self, snapshot: Snapshot) -> str:
        """Upload ``snapshot`` as this owner's newest object, prune, return its URL."""
        if self.read_only:
            raise SnapshotStoreError(f"snapshot store {self!r} is read-only", path=self._own)
        header, body, trailer = encode_snapshot_parts(snapshot)
        try:
            data = b"".join((header, body, trailer))
        finally:
            body.release()
        with self._lock:
            for _ in range(_WRITE_ATTEMPTS):
                newest = self._own_entries()
                seq = max(self._last_seq, newest[0].seq if newest else 0) + 1
                key = self.key_for(seq)
                self._last_seq = seq
                try:
                    self._client.put_object(
                        Bucket=self.bucket,
                        Key=key,
                        Body=data,
                        IfNoneMatch="*",
                        ContentType="application/octet-stream",
                        **self._object_args,
                    )
                except ClientError as e:
                    code, status = _status(e)
                    if code == "PreconditionFailed" or status == 412:
                        log.warning("snapshot %s exists already: another writer?", self.url(key))
                        continue
                    raise SnapshotStoreError(
                        f"cannot write snapshot {self.url(key)}: {e}", path=self.url(key)
                    ) from e
                except BotoCoreError as e:
                    error = SnapshotStoreError(
                        f"cannot write snapshot {self.url(key)}: {e}", path=self.url(key)
                    )
                    error.retriable = True
                    raise error from e
                break
            else:
                raise SnapshotStoreError(
                    f"cannot write a snapshot under {self.url(self._own)}: {_WRITE_ATTEMPTS} "
                    "sequence numbers were taken by another writer of the same owner",
                    path=self.url(self._own),
                )
            self._known_valid.add(key)
            self.stats.written += 1
            log.debug("wrote snapshot %s (%d bytes)", self.url(key), len(data))
            self._prune()
        return self.url(key)

    # ----------------------------------------------------------------- pruning

    def _get(self, entry: _Entry) -> bytes | None:
        """The object's bytes, or None if it vanished (pruned by its owner meanwhile)."""
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=entry.key)
            body = response["Body"]
            try:
                data: bytes = body.read()
            finally:
                body.close()
        except ClientError as e:
            code, status = _status(e)
            if code in ("NoSuchKey", "404") or status == 404:
                return None
            raise SnapshotStoreError(
                f"cannot read snapshot {self.url(entry.key)}: {e}", path=self.url(entry.key)
            ) from e
        except BotoCoreError as e:
            raise SnapshotStoreError(
                f"cannot read snapshot {self.url(entry.key)}: {e}", path=self.url(entry.key)
            ) from e
        return data

    def _problem(self, entry: _Entry) -> str | None:
        if entry.key in self._known_valid:
            return None
        try:
            data = self._get(entry)
        except SnapshotStoreError as e:
            return str(e)
        if data is None:
            return "gone"
        try:
            verify_snapshot(data, self.url(entry.key))
        except SnapshotError as e:
            return str(e)
        self._known_valid.add(entry.key)
        return None

    def _prune(self) -> None:
        """Keep this owner's newest ``keep`` valid objects; delete every other one."""
        entries = self._own_entries()
        if len(entries) <= self.keep:
            return
        doomed: list[str] = []
        kept = 0
        for entry in entries:
            if kept < self.keep:
                problem = self._problem(entry)
                if problem is None:
                    kept += 1
                    continue
                log.warning("deleting unusable snapshot %s: %s", self.url(entry.key), problem)
            doomed.append(entry.key)
        for i in range(0, len(doomed), 1000):
            batch = doomed[i : i + 1000]
            try:
                response = self._call(
                    "delete_objects",
                    None,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except SnapshotStoreError as e:
                # A failed prune leaves extra old snapshots: harmless, retried next write.
                log.warning("cannot prune snapshots under %s: %s", self.url(self._own), e)
                return
            failed = {str(err.get("Key")) for err in response.get("Errors", [])}
            for key in batch:
                if key in failed:
                    log.warning("cannot prune snapshot %s", self.url(key))
                    continue
                self._known_valid.discard(key)
                self.stats.pruned += 1
                log.debug("pruned snapshot %s", self.url(key))

    # ----------------------------------------------------------------- loading

    def load_latest(self) -> Snapshot | None:
        """This owner's newest valid snapshot, or None (the caller replays fully).

        Raises SnapshotStoreError only if the owner's objects cannot be listed.
        """
        return next((snap for _, snap in self.iter_valid()), None)

    def iter_valid(self, *, all_owners: bool = False) -> Iterator[tuple[str, Snapshot]]:
        entries = self._list(self._root) if all_owners else self._own_entries()
        for entry in entries:
            url = self.url(entry.key)
            try:
                data = self._get(entry)
            except SnapshotStoreError as exc:
                self.stats.skipped_unreadable += 1
                log.warning("skipping unreadable snapshot %s: %s", url, exc)
                continue
            if data is None:
                continue
            snapshot = self._decode_or_skip(data, url, log)
            del data
            if snapshot is None:
                continue
            if entry.owner == self.owner:
                self._known_valid.add(entry.key)
            yield url, snapshot

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._close_client:
            self._client.close()


__all__ = ["SUBPREFIX", "S3SnapshotStore"]
