"""The RemoteStorageManager contract, run against every backend (local, moto, moto server)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from remote import (
    IndexType,
    InvalidRangeError,
    InvalidRemotePathError,
    RemoteIntegrityError,
    RemoteObjectExistsError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    SegmentManifest,
)
from remote.naming import OBJECT_KINDS, object_name, parse_object_name
from rlmm.model import kafka_uuid_to_str
from tests.remote.conftest import BUCKET, Backend, finished, make_metadata, write_segment

FIELD_OF = {
    IndexType.OFFSET: "offset_index",
    IndexType.TIMESTAMP: "time_index",
    IndexType.PRODUCER_SNAPSHOT: "producer_snapshot_index",
    IndexType.TRANSACTION: "transaction_index",
    IndexType.LEADER_EPOCH: "leader_epoch_index",
}


def test_copy_then_fetch_every_index(backend: Backend, tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "local")
    metadata = make_metadata()
    custom = backend.rsm.copy_log_segment_data(metadata, seg.data)
    assert custom is not None and len(custom) <= 128  # Kafka's default custom metadata cap
    manifest = SegmentManifest.decode(custom)
    assert manifest.objects[None].size == len(seg.contents["log_segment"])
    for meta in (metadata, finished(metadata, custom)):
        for index_type, field_name in FIELD_OF.items():
            assert backend.rsm.fetch_index(meta, index_type) == seg.contents[field_name]
        with backend.rsm.fetch_log_segment(meta, 0) as stream:
            assert stream.read() == seg.contents["log_segment"]


def test_layout_is_kafka_named(backend: Backend, tmp_path: Path) -> None:
    metadata = make_metadata(topic="orders.v2_x-y", partition=7, start_offset=42)
    backend.rsm.copy_log_segment_data(metadata, write_segment(tmp_path / "l").data)
    seg_id = kafka_uuid_to_str(metadata.remote_log_segment_id.id)
    base = f"orders.v2_x-y-Bp9TDduJRGa9Q5rlvCJOxg/7/00000000000000000042-{seg_id}"
    expected = [
        base + ext
        for ext in (
            ".index",
            ".leader-epoch-checkpoint",
            ".log",
            ".snapshot",
            ".timeindex",
            ".txnindex",
        )
    ]
    keys = backend.list_keys()
    assert [k.removeprefix("tiered/v1/") for k in keys] == expected


RANGES = [
    (0, None, slice(0, None)),  # whole segment, open end
    (0, 0, slice(0, 1)),  # first byte, inclusive end
    (1000, 1999, slice(1000, 2000)),  # middle
    (150_000, None, slice(150_000, None)),  # open end from the middle
    (299_999, 299_999, slice(299_999, 300_000)),  # last byte
    (299_000, 10**9, slice(299_000, None)),  # end past the segment: clamped
    (0, 299_999, slice(0, None)),  # whole segment, explicit end
]


def test_fetch_ranges(backend: Backend, tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "local")
    metadata = make_metadata()
    custom = backend.rsm.copy_log_segment_data(metadata, seg.data)
    for start, end, expected in RANGES:
        want = seg.contents["log_segment"][expected]
        for meta in (metadata, finished(metadata, custom)):
            with backend.rsm.fetch_log_segment(meta, start, end) as stream:
                # Small reads and one read of the rest: both paths of the stream.
                got = stream.read(7) + stream.read(100) + stream.read()
                assert stream.read() == b""
            assert got == want, (start, end)


def test_bad_ranges(backend: Backend, tmp_path: Path) -> None:
    metadata = make_metadata()
    backend.rsm.copy_log_segment_data(metadata, write_segment(tmp_path / "l").data)
    for start, end in [(-1, None), (10, 9), (300_000, None), (400_000, 400_001)]:
        with pytest.raises(InvalidRangeError):
            backend.rsm.fetch_log_segment(metadata, start, end).close()


def test_delete_is_idempotent(backend: Backend, tmp_path: Path) -> None:
    keep = make_metadata(start_offset=0)
    gone = make_metadata(start_offset=1000)
    backend.rsm.copy_log_segment_data(keep, write_segment(tmp_path / "a", seed=1).data)
    backend.rsm.copy_log_segment_data(gone, write_segment(tmp_path / "b", seed=2).data)
    backend.rsm.delete_log_segment_data(gone)
    backend.rsm.delete_log_segment_data(gone)
    backend.rsm.delete_log_segment_data(make_metadata())  # never copied
    assert len(backend.list_keys()) == 6
    assert all("00000000000000000000-" in k for k in backend.list_keys())
    with pytest.raises(RemoteResourceNotFoundError):
        backend.rsm.fetch_index(gone, IndexType.OFFSET)
    backend.rsm.delete_log_segment_data(keep)
    assert backend.list_keys() == []


def test_unknown_segment_names_the_key(backend: Backend) -> None:
    metadata = make_metadata()
    seg_id = kafka_uuid_to_str(metadata.remote_log_segment_id.id)
    with pytest.raises(RemoteResourceNotFoundError, match=seg_id):
        backend.rsm.fetch_log_segment(metadata, 0)
    for index_type in IndexType:
        with pytest.raises(RemoteResourceNotFoundError, match=seg_id):
            backend.rsm.fetch_index(metadata, index_type)


def test_missing_transaction_index(backend: Backend, tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "local", with_txn=False)
    metadata = make_metadata()
    custom = backend.rsm.copy_log_segment_data(metadata, seg.data)
    assert len(backend.list_keys()) == 5
    for meta in (metadata, finished(metadata, custom)):
        with pytest.raises(RemoteResourceNotFoundError, match="TRANSACTION"):
            backend.rsm.fetch_index(meta, IndexType.TRANSACTION)
        assert backend.rsm.fetch_index(meta, IndexType.OFFSET) == seg.contents["offset_index"]


def test_write_once(backend: Backend, tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "a", seed=1)
    metadata = make_metadata()
    first = backend.rsm.copy_log_segment_data(metadata, seg.data)
    # A retry of the same copy (same segment id, same bytes) succeeds.
    assert backend.rsm.copy_log_segment_data(metadata, seg.data) == first
    other = write_segment(tmp_path / "b", seed=2)
    with pytest.raises(RemoteObjectExistsError, match=r"\.(log|index|timeindex|snapshot|txnindex)"):
        backend.rsm.copy_log_segment_data(metadata, other.data)
    # The first copy is untouched.
    assert len(backend.list_keys()) == 6
    with backend.rsm.fetch_log_segment(finished(metadata, first), 0) as stream:
        assert stream.read() == seg.contents["log_segment"]


ESCAPING_TOPICS = ["..", ".", "", "a/b", "../../etc", "x\x00y", "a\\b", "t" * 250]


def test_path_escapes_are_refused(backend: Backend, tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "l")
    for topic in ESCAPING_TOPICS:
        metadata = make_metadata(topic=topic)
        with pytest.raises(InvalidRemotePathError):
            backend.rsm.copy_log_segment_data(metadata, seg.data)
        with pytest.raises(InvalidRemotePathError):
            backend.rsm.fetch_log_segment(metadata, 0)
        with pytest.raises(InvalidRemotePathError):
            backend.rsm.fetch_index(metadata, IndexType.OFFSET)
        with pytest.raises(InvalidRemotePathError):
            backend.rsm.delete_log_segment_data(metadata)
    assert backend.list_keys() == []


def test_tampered_objects_are_detected(backend: Backend, tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "l")
    metadata = make_metadata()
    meta = finished(metadata, backend.rsm.copy_log_segment_data(metadata, seg.data))
    index = bytearray(seg.contents["offset_index"])
    index[17] ^= 0x01
    backend.tamper(metadata, IndexType.OFFSET, bytes(index))
    with pytest.raises(RemoteIntegrityError, match=r"\.index"):
        backend.rsm.fetch_index(meta, IndexType.OFFSET)
    log = bytearray(seg.contents["log_segment"])
    log[-1] ^= 0xFF
    backend.tamper(metadata, None, bytes(log))
    with (
        pytest.raises(RemoteIntegrityError, match=r"\.log"),
        backend.rsm.fetch_log_segment(meta, 0) as stream,
    ):
        stream.read()
    # A range that is not the whole segment has no checksum to verify: bytes as stored.
    with backend.rsm.fetch_log_segment(meta, 10, 20) as stream:
        assert stream.read() == bytes(log[10:21])


def test_concurrent_copies_and_fetches(backend: Backend, tmp_path: Path) -> None:
    segments = [
        (make_metadata(start_offset=i * 100), write_segment(tmp_path / f"s{i}", 50_000, seed=i))
        for i in range(6)
    ]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        metadata, seg = segments[i]
        try:
            backend.rsm.copy_log_segment_data(metadata, seg.data)
            with backend.rsm.fetch_log_segment(metadata, 0) as stream:
                assert stream.read() == seg.contents["log_segment"]
            if i % 2:
                backend.rsm.delete_log_segment_data(metadata)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(segments))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(backend.list_keys()) == 3 * 6


def test_closed_manager_refuses_work(backend: Backend, tmp_path: Path) -> None:
    with backend.rsm as rsm:
        pass
    rsm.close()  # idempotent
    with pytest.raises(RemoteStorageError, match="closed"):
        rsm.copy_log_segment_data(make_metadata(), write_segment(tmp_path / "l").data)
    with pytest.raises(RemoteStorageError, match="closed"):
        rsm.fetch_index(make_metadata(), IndexType.OFFSET)


# --- inventory: listing, raw reads, deletes by name, multipart uploads -----------------


def test_list_objects_names_match_the_layout(backend: Backend, tmp_path: Path) -> None:
    a = make_metadata(partition=0, start_offset=0)
    b = make_metadata(partition=1, start_offset=100)
    seg_a = write_segment(tmp_path / "a", seed=1)
    backend.rsm.copy_log_segment_data(a, seg_a.data)
    backend.rsm.copy_log_segment_data(b, write_segment(tmp_path / "b", seed=2).data)
    everything = list(backend.rsm.list_objects())
    assert [o.name for o in everything] == sorted(
        object_name(m, kind) for m in (a, b) for kind in OBJECT_KINDS
    )
    assert [o.name for o in everything] == sorted(o.name for o in everything)
    now_ms = time.time() * 1000
    assert all(now_ms - 600_000 < o.last_modified_ms < now_ms + 600_000 for o in everything)
    only_a = list(backend.rsm.list_objects(a.topic_id_partition))
    assert {o.name for o in only_a} == {object_name(a, kind) for kind in OBJECT_KINDS}
    sizes = {o.name: o.size for o in only_a}
    assert sizes[object_name(a, None)] == len(seg_a.contents["log_segment"])
    assert sizes[object_name(a, IndexType.OFFSET)] == len(seg_a.contents["offset_index"])
    for name in sizes:
        parsed = parse_object_name(name)
        assert parsed is not None
        assert parsed.segment_id == kafka_uuid_to_str(a.remote_log_segment_id.id)
        assert (parsed.topic, parsed.partition, parsed.start_offset) == ("orders", 0, 0)
    other = make_metadata(topic="other")
    assert list(backend.rsm.list_objects(other.topic_id_partition)) == []


def test_open_object_returns_stored_bytes_unverified(backend: Backend, tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "l")
    metadata = make_metadata()
    backend.rsm.copy_log_segment_data(metadata, seg.data)
    name = object_name(metadata, None)
    with backend.rsm.open_object(name) as stream:
        assert stream.read() == seg.contents["log_segment"]
    tampered = bytearray(seg.contents["log_segment"])
    tampered[5] ^= 0xFF
    backend.tamper(metadata, None, bytes(tampered))
    with backend.rsm.open_object(name) as stream:  # no checksum check: the caller's job
        assert stream.read() == bytes(tampered)
    with pytest.raises(RemoteResourceNotFoundError, match="nothing-here"):
        backend.rsm.open_object("orders-x/0/nothing-here.log").close()
    for bad in ("../x", "/etc/passwd", "a//b", "a/./b", ""):
        with pytest.raises(InvalidRemotePathError):
            backend.rsm.open_object(bad).close()


def test_delete_objects_by_name(backend: Backend, tmp_path: Path) -> None:
    metadata = make_metadata()
    backend.rsm.copy_log_segment_data(metadata, write_segment(tmp_path / "l").data)
    log_name = object_name(metadata, None)
    backend.rsm.delete_objects([log_name, "orders-x/0/never-existed.log"])
    names = [o.name for o in backend.rsm.list_objects()]
    assert log_name not in names and len(names) == 5
    backend.rsm.delete_objects(names)
    assert list(backend.rsm.list_objects()) == []
    with pytest.raises(InvalidRemotePathError):
        backend.rsm.delete_objects(["../outside"])


def test_parse_object_name_rejects_foreign_names() -> None:
    metadata = make_metadata()
    assert parse_object_name(object_name(metadata, IndexType.TIMESTAMP)) is not None
    for foreign in ("README", "orders/0/x.log", object_name(metadata, None) + ".bak"):
        assert parse_object_name(foreign) is None
    temp = object_name(metadata, None).replace("/00000", "/.00000") + ".0123abcd.tmp"
    parsed = parse_object_name(temp)
    assert parsed is not None and parsed.temporary and parsed.suffix == ".log"


def test_multipart_uploads_listed_and_aborted(backend: Backend) -> None:
    assert backend.rsm.list_multipart_uploads() == []
    if backend.name == "local":
        return  # a local directory has no multipart uploads
    from remote.s3 import S3RemoteStorageManager

    assert isinstance(backend.rsm, S3RemoteStorageManager)
    name = object_name(make_metadata(), None)
    client = backend.rsm.client
    created = client.create_multipart_upload(Bucket=BUCKET, Key=f"tiered/v1/{name}")
    client.create_multipart_upload(Bucket=BUCKET, Key="elsewhere/x.log")  # not under the prefix
    uploads = backend.rsm.list_multipart_uploads()
    assert [(u.name, u.upload_id) for u in uploads] == [(name, created["UploadId"])]
    # moto reports a fixed Initiated date (2010); S3 reports the real one: only the past.
    assert 0 < uploads[0].initiated_ms < time.time() * 1000 + 600_000
    backend.rsm.abort_multipart_upload(uploads[0])
    backend.rsm.abort_multipart_upload(uploads[0])  # idempotent
    assert backend.rsm.list_multipart_uploads() == []
    assert backend.open_uploads() == ["elsewhere/x.log"]
