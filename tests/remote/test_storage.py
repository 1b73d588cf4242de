"""Units of remote.storage: IndexType, LogSegmentData, layout, manifest, factory, exports."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest

import remote
from remote import (
    IndexType,
    InvalidRemotePathError,
    LogSegmentData,
    SegmentManifest,
    load_remote_storage_manager,
)
from remote.errors import CorruptObjectError
from remote.local import LocalRemoteStorageManager
from remote.manifest import ObjectChecksum
from remote.naming import OBJECT_KINDS, check_prefix, check_topic_name, object_name
from remote.streams import resolve_range
from rlmm.errors import ConfigError
from tests.remote.conftest import make_metadata


def test_index_type_keeps_kafka_names_and_ordinals() -> None:
    assert [(t.name, t.value) for t in IndexType] == [
        ("OFFSET", 0),
        ("TIMESTAMP", 1),
        ("PRODUCER_SNAPSHOT", 2),
        ("TRANSACTION", 3),
        ("LEADER_EPOCH", 4),
    ]


def test_log_segment_data_coerces_and_validates(tmp_path: Path) -> None:
    data = LogSegmentData(
        str(tmp_path / "0.log"),  # type: ignore[arg-type]
        tmp_path / "0.index",
        tmp_path / "0.timeindex",
        None,
        tmp_path / "0.snapshot",
        bytearray(b"0\n0\n"),  # type: ignore[arg-type]
    )
    assert data.log_segment == tmp_path / "0.log"
    assert data.leader_epoch_index == b"0\n0\n"
    assert data.source(IndexType.TRANSACTION) is None
    assert data.source(None) == tmp_path / "0.log"
    with pytest.raises(TypeError):
        LogSegmentData(1, 2, 3, None, 4, b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        text: Any = "not bytes"
        path = data.log_segment
        LogSegmentData(path, path, path, None, path, text)


def test_object_name_layout() -> None:
    seg = uuid.UUID("00000000-0000-0000-0000-000000000001")
    metadata = make_metadata(topic="t", partition=3, start_offset=12, segment_id=seg)
    assert object_name(metadata, IndexType.LEADER_EPOCH, "p/q") == (
        "p/q/t-Bp9TDduJRGa9Q5rlvCJOxg/3/00000000000000000012-AAAAAAAAAAAAAAAAAAAAAQ"
        ".leader-epoch-checkpoint"
    )
    assert object_name(metadata, None).endswith("/00000000000000000012-AAAAAAAAAAAAAAAAAAAAAQ.log")


@pytest.mark.parametrize("topic", ["orders", "a.b_c-d", "..x", "x" * 249])
def test_legal_topics(topic: str) -> None:
    assert check_topic_name(topic) == topic


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "a b", "é", "x" * 250, "a\x00"])
def test_illegal_topics(topic: str) -> None:
    with pytest.raises(InvalidRemotePathError):
        check_topic_name(topic)


def test_prefix_rules() -> None:
    assert check_prefix("/a/b/") == "a/b"
    assert check_prefix("") == ""
    for bad in ("a/../b", "a//b", "./a", "a\x00"):
        with pytest.raises(InvalidRemotePathError):
            check_prefix(bad)


def test_manifest_roundtrip_and_size() -> None:
    big = ObjectChecksum(2**31 - 1, 0xFFFFFFFF)
    manifest = SegmentManifest(
        {kind: big for kind in OBJECT_KINDS if kind is not IndexType.TRANSACTION}
    )
    encoded = manifest.encode()
    assert len(encoded) <= 128
    assert SegmentManifest.decode(encoded) == manifest
    assert IndexType.TRANSACTION not in SegmentManifest.decode(encoded).objects


def test_manifest_v2_keeps_the_smallest_timestamp_and_v1_still_decodes() -> None:
    objects = {kind: ObjectChecksum(100 + kind_no, kind_no) for kind_no, kind in enumerate(
        OBJECT_KINDS
    )}  # fmt: skip
    v1 = SegmentManifest(objects).encode()
    assert msgpack.unpackb(v1)[0] == 1  # nothing new to say: readers before v2 keep verifying
    assert SegmentManifest.decode(v1) == SegmentManifest(objects, None)
    # A version 1 manifest as rlmm wrote it before version 2 existed.
    old = msgpack.packb([1, [[100 + i, i] for i in range(len(OBJECT_KINDS))]])
    assert SegmentManifest.decode(old) == SegmentManifest(objects)
    for smallest in (-1, 0, 1_700_000_000_000, 2**63 - 1):
        v2 = SegmentManifest(objects, smallest).encode()
        assert msgpack.unpackb(v2)[0] == 2
        assert SegmentManifest.decode(v2).smallest_timestamp_ms == smallest
        assert SegmentManifest.decode(v2) == SegmentManifest(objects, smallest)


def test_manifest_at_its_largest_fits_kafkas_default_cap() -> None:
    # Every object present with the largest size and CRC, and the largest timestamp.
    big = ObjectChecksum(2**63 - 1, 0xFFFFFFFF)
    largest = SegmentManifest(dict.fromkeys(OBJECT_KINDS, big), 2**63 - 1).encode()
    assert len(largest) <= remote.manifest.KAFKA_CUSTOM_METADATA_MAX_BYTES == 128


@pytest.mark.parametrize(
    "data",
    [
        msgpack.packb([2, [None] * 6]),  # v2 without its timestamp
        msgpack.packb([2, [None] * 6, -2]),
        msgpack.packb([2, [None] * 6, 2**63]),
        msgpack.packb([2, [None] * 6, 1.5]),
        msgpack.packb([2, [None] * 6, True]),
        msgpack.packb([2, [None] * 6, "1700000000000"]),
        msgpack.packb([2, [None] * 6, 1, 2]),
        msgpack.packb([1, [None] * 6, 1]),  # v1 with a timestamp
        msgpack.packb([3, [None] * 6, 1]),
        msgpack.packb([2, [None] * 5, 1]),
        msgpack.packb([2, [[1, -1]] + [None] * 5, 1]),
        msgpack.packb([]),
    ],
)
def test_corrupt_v2_manifest_is_a_corrupt_object_error(data: bytes) -> None:
    with pytest.raises(CorruptObjectError):
        SegmentManifest.decode(data, "seg.log")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        msgpack.packb([3, [None] * 6]),
        msgpack.packb([1, [None] * 5]),
        msgpack.packb([1, [[1, -1]] + [None] * 5]),
        msgpack.packb([1, [["a", 1]] + [None] * 5]),
        msgpack.packb({"v": 1}),
    ],
)
def test_manifest_rejects_foreign_bytes(data: bytes) -> None:
    with pytest.raises(ValueError):
        SegmentManifest.decode(data)


def test_foreign_custom_metadata_is_ignored() -> None:
    metadata = make_metadata()
    assert SegmentManifest.of(metadata) is None
    foreign = dataclasses.replace(metadata, custom_metadata=b"xyz")
    assert SegmentManifest.of(foreign) is None


def test_resolve_range() -> None:
    assert resolve_range("k", 10, 0, None) == (0, 10)
    assert resolve_range("k", 10, 9, 9) == (9, 1)
    assert resolve_range("k", 10, 3, 100) == (3, 7)
    assert resolve_range("k", 0, 0, None) == (0, 0)


def test_factory_builds_backends(tmp_path: Path, mock_s3: None) -> None:
    with load_remote_storage_manager({"type": "local", "root": str(tmp_path)}) as local:
        assert isinstance(local, LocalRemoteStorageManager)
        assert local.root == tmp_path.resolve()
    with load_remote_storage_manager(
        {"type": "s3", "bucket": "b-1", "prefix": "x", "region": "us-east-1", "sse": "AES256"}
    ) as s3:
        assert type(s3).__name__ == "S3RemoteStorageManager"
    with pytest.raises(ConfigError, match=r"unknown remote\.type 'gcs' .* rlmm\.remote_stores"):
        load_remote_storage_manager({"type": "gcs"})
    with pytest.raises(ConfigError, match="bukket"):
        load_remote_storage_manager({"type": "s3", "bukket": "b"})


def test_public_names_resolve() -> None:
    """What remote offers it imports itself; a backend, remote.segments' names and the
    names remote.storage once held come from their own modules."""
    for name in remote.__all__:
        assert getattr(remote, name) is not None, name
    for module, names in (
        (remote, ("NoSuchThing", "S3RemoteStorageManager", "iter_records", "CODECS")),
        (remote.storage, ("object_name", "SegmentManifest", "verifying_stream")),
    ):
        for name in names:
            with pytest.raises(AttributeError):
                getattr(module, name)


def test_import_remote_is_lazy() -> None:
    code = (
        "import sys, remote, remote.storage; "
        "print(sorted(m for m in ('boto3', 'botocore', 'remote.s3', 'remote.segments') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"
