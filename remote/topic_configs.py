"""TopicConfigStore: each topic's own configs, kept in rlmm's store beside its segments.

`rlmm offload` learns a topic's configs from its cluster (DescribeConfigs) and keeps
them here, so that `rlmm restore` can create the topic again as it was, also once the
cluster is gone. One object per topic id, under the store's root or prefix (a topic's
directory is ``<topic>-<topic id>``, and ``__topic_configs`` has no such ending, so the
two never collide, as ``__snapshots`` does not)::

    <root or s3://bucket/prefix>/__topic_configs/<topic>-<topic id>.json

The object is JSON, ``{"version": 1, "topic": ..., "topic_id": ..., "configs": {name:
value}, "updated_ms": ...}``: ``configs`` are the configs set on the topic itself
(Kafka's ``TOPIC_CONFIG`` source), not the brokers' defaults. The version selects the
decoder; byte I/O stays in the store, the value is a plain ``TopicConfigs``.

Invariants: an object is replaced whole or not at all (a local file is written aside,
fsynced and renamed over the old one; an S3 PUT replaces an object atomically), so a
reader sees the old configs or the new, never a mix; a reader refuses a version it
does not know and an object that does not decode (TopicConfigsError naming the object
and the remedy), never guesses; a topic name is checked (``check_topic_name``) before
any path is built from it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote.errors import RemoteResourceNotFoundError, RemoteStorageError, TopicConfigsError
from remote.naming import check_prefix, check_topic_name

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from remote._s3_client import S3Calls

SUBDIR = "__topic_configs"
VERSION = 1
MAX_BYTES = 1 << 20  # a topic has a few dozen configs: anything larger is not ours
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}")


@dataclass(frozen=True)
class TopicConfigs:
    """The configs set on one topic (by topic id), as its cluster described them."""

    topic: str
    topic_id: str  # Kafka's base64url text
    configs: Mapping[str, str] = field(default_factory=dict)
    updated_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": VERSION,
                "topic": self.topic,
                "topic_id": self.topic_id,
                "configs": dict(sorted(self.configs.items())),
                "updated_ms": self.updated_ms,
            },
            sort_keys=True,
            indent=1,
        ).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> TopicConfigs:
        """The configs in ``data`` (``where``: the object, for messages)."""
        remedy = (
            "delete it (the next `rlmm offload` round that refreshes the topic's configs"
            " writes it again), or restore with --no-topic-configs"
        )
        try:
            fields = json.loads(data)
        except ValueError as e:
            raise TopicConfigsError(f"{where} is not JSON ({e}): {remedy}") from e
        if not isinstance(fields, dict):
            raise TopicConfigsError(f"{where} is not a JSON object: {remedy}")
        version = fields.get("version")
        if version != VERSION:
            raise TopicConfigsError(
                f"{where} is of version {version!r}; this rlmm reads version {VERSION} (a"
                " newer rlmm wrote it?): upgrade rlmm, or restore with --no-topic-configs"
            )
        topic, topic_id = fields.get("topic"), fields.get("topic_id")
        configs, updated = fields.get("configs"), fields.get("updated_ms")
        if (
            not isinstance(topic, str)
            or not isinstance(topic_id, str)
            or not isinstance(configs, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items())
            or not isinstance(updated, int)
            or isinstance(updated, bool)
        ):
            raise TopicConfigsError(
                f"{where} does not hold a topic, a topic id, configs (names to text) and"
                f" updated_ms: {remedy}"
            )
        return cls(topic, topic_id, dict(configs), updated)


def object_name(topic: str, topic_id: str) -> str:
    """``__topic_configs/<topic>-<topic id>.json``, relative to the root or prefix."""
    if not _TOPIC_ID.fullmatch(topic_id):
        raise TopicConfigsError(f"topic id {topic_id!r} is not Kafka's base64url text")
    return f"{SUBDIR}/{check_topic_name(topic)}-{topic_id}.json"


class TopicConfigStore:
    """The objects under one local root or ``s3://bucket/prefix`` (the ``[remote]`` store)."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        fsync: bool = True,
        s3_client: S3Client | None = None,
        bucket: str | None = None,
        prefix: str = "",
        object_args: Mapping[str, Any] | None = None,
    ) -> None:
        self._calls: S3Calls | None = None
        self._fsync = fsync
        self._object_args = dict(object_args or {})
        if root is not None:
            self._root = Path(root)
            self.location = str(self._root)
        else:
            if not bucket or s3_client is None:
                raise TopicConfigsError("a topic config store needs a root, or a bucket and client")
            from remote._s3_client import S3Calls  # boto3 only for an S3 store

            self._calls = S3Calls(s3_client, bucket)
            cleaned = check_prefix(prefix)
            self._prefix = f"{cleaned}/" if cleaned else ""
            self.location = f"s3://{bucket}/{cleaned}".rstrip("/")

    def __repr__(self) -> str:
        return f"TopicConfigStore({self.location!r})"

    def where(self, topic: str, topic_id: str) -> str:
        """The object's full location, for messages."""
        return f"{self.location}/{object_name(topic, topic_id)}"

    def read(self, topic: str, topic_id: str) -> TopicConfigs | None:
        """The configs kept for ``topic`` (``topic_id``); None when none are kept."""
        name = object_name(topic, topic_id)
        where = self.where(topic, topic_id)
        try:
            if self._calls is not None:
                with self._calls.open(self._prefix + name) as stream:
                    data = stream.read(MAX_BYTES + 1)
            else:
                with open(self._root / name, "rb") as f:
                    data = f.read(MAX_BYTES + 1)
        except (FileNotFoundError, RemoteResourceNotFoundError):
            return None
        except (OSError, RemoteStorageError) as e:
            raise TopicConfigsError(f"cannot read {where}: {e}") from e
        if len(data) > MAX_BYTES:
            raise TopicConfigsError(f"{where} is larger than {MAX_BYTES} bytes: not rlmm's")
        found = TopicConfigs.decode(data, where)
        if (found.topic, found.topic_id) != (topic, topic_id):
            raise TopicConfigsError(
                f"{where} holds the configs of {found.topic} (topic id {found.topic_id}):"
                " it was copied or renamed by hand; delete it"
            )
        return found

    def write(self, configs: TopicConfigs) -> None:
        """Replace the topic's object with ``configs``, whole (TopicConfigsError if not)."""
        name = object_name(configs.topic, configs.topic_id)
        data = configs.encode()
        if self._calls is not None:
            try:
                self._calls.call(
                    "put_object",
                    self._prefix + name,
                    Body=data,
                    ContentType="application/json",
                    **self._object_args,
                )
            except RemoteStorageError as e:
                raise TopicConfigsError(
                    f"cannot write {self.where(configs.topic, configs.topic_id)}: {e}"
                ) from e
            return
        path = self._root / name
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                if self._fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            if self._fsync:
                fd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise TopicConfigsError(f"cannot write {path}: {e}") from e

    def close(self) -> None:
        if self._calls is not None:
            self._calls.client.close()


__all__ = ["MAX_BYTES", "SUBDIR", "VERSION", "TopicConfigStore", "TopicConfigs", "object_name"]
