"""The SnapshotStore contract, run against every backend (local directory, S3 via moto).

Newest valid wins, keep K per owner, corrupt and partial snapshots skipped with a
warning (falling back to an older one), read-only stores never write, and the
factory builds each backend from options.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from snapshot import (
    Snapshot,
    SnapshotConfigError,
    SnapshotStore,
    SnapshotStoreError,
    load_snapshot_store,
)
from snapshot.local import LocalSnapshotStore
from snapshot.s3 import S3SnapshotStore

BUCKET = "snapshots"


def snap(i: int) -> Snapshot:
    return Snapshot(
        partition_count=4,
        applied_offsets={0: 10 * i, 3: 20 * i},
        state={"i": i, "segments": [[i, k, b"seg"] for k in range(50)]},
        created_ms=1_700_000_000_000 + i,
    )


def loaded_i(store: SnapshotStore) -> int | None:
    loaded = store.load_latest()
    return None if loaded is None else int(loaded.state["i"])


class Backend:
    """Builds stores of one backend and damages their snapshots like a bad disk or tool."""

    def __init__(self, kind: str, tmp_path: Path, endpoint: str | None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.client: Any = None
        self.opened: list[SnapshotStore] = []
        if kind == "s3":
            import boto3

            self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            self.client.create_bucket(Bucket=BUCKET)

    def make(
        self, keep: int = 2, owner: str = "broker-0", read_only: bool = False
    ) -> SnapshotStore:
        store: SnapshotStore
        if self.kind == "local":
            store = LocalSnapshotStore(self.tmp_path / owner, keep=keep, read_only=read_only)
        else:
            store = S3SnapshotStore(
                self.client, BUCKET, "tiered/", owner=owner, keep=keep, read_only=read_only
            )
        self.opened.append(store)
        return store

    def read(self, location: str) -> bytes:
        if self.kind == "local":
            return Path(location).read_bytes()
        key = location.removeprefix(f"s3://{BUCKET}/")
        return bytes(self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def replace(self, location: str, data: bytes) -> None:
        """Overwrite in place (S3: a plain PUT, as a foreign tool would)."""
        if self.kind == "local":
            Path(location).write_bytes(data)
        else:
            key = location.removeprefix(f"s3://{BUCKET}/")
            self.client.put_object(Bucket=BUCKET, Key=key, Body=data)

    def close(self) -> None:
        for store in self.opened:
            store.close()
        if self.client is not None:
            self.client.close()


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    endpoint = request.getfixturevalue("s3_endpoint") if request.param == "s3" else None
    b = Backend(str(request.param), tmp_path, endpoint)
    try:
        yield b
    finally:
        b.close()


def flip(data: bytes) -> bytes:
    out = bytearray(data)
    out[len(out) // 2] ^= 0xFF
    return bytes(out)


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def test_empty_store_loads_nothing(backend: Backend) -> None:
    store = backend.make()
    assert store.load_latest() is None
    assert store.kept() == []


def test_round_trip_and_newest_wins(backend: Backend) -> None:
    store = backend.make(keep=3)
    locations = [str(store.write(snap(i))) for i in range(1, 4)]
    assert store.kept() == locations[::-1]
    assert store.load_latest() == snap(3)
    assert [s.state["i"] for _, s in store.iter_valid()] == [3, 2, 1]
    if backend.kind == "s3":
        assert locations[0] == f"s3://{BUCKET}/tiered/__snapshots/broker-0/" + (
            "snapshot-00000000000000000001.rlmm"
        )


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_keeps_the_newest_k(backend: Backend, keep: int) -> None:
    store = backend.make(keep=keep)
    for i in range(1, 7):
        store.write(snap(i))
        assert len(store.kept()) == min(i, keep)
    assert [s.state["i"] for _, s in store.iter_valid()] == list(range(6, 6 - keep, -1))
    assert store.stats.pruned == 6 - keep


@pytest.mark.parametrize("damage", [flip, truncate], ids=["corrupt", "partial"])
def test_bad_newest_is_skipped_with_a_warning(
    backend: Backend, damage: Callable[[bytes], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    store = backend.make(keep=3)
    store.write(snap(1))
    newest = str(store.write(snap(2)))
    backend.replace(newest, damage(backend.read(newest)))
    reader = backend.make(keep=3, read_only=True)
    with caplog.at_level(logging.WARNING):
        assert loaded_i(reader) == 1
    assert "skipping corrupt snapshot" in caplog.text and newest in caplog.text
    assert reader.stats.skipped_corrupt == 1


def test_pruning_never_keeps_a_bad_one_in_place_of_a_good_one(backend: Backend) -> None:
    store = backend.make(keep=2)
    store.write(snap(1))
    bad = str(store.write(snap(2)))
    backend.replace(bad, flip(backend.read(bad)))
    # A new process: it did not write ``bad``, so pruning has to check it.
    again = backend.make(keep=2)
    again.write(snap(3))
    again.write(snap(4))
    assert bad not in again.kept()
    assert [s.state["i"] for _, s in again.iter_valid()] == [4, 3]


def test_all_bad_means_none(backend: Backend) -> None:
    store = backend.make(keep=2)
    for i in (1, 2):
        location = str(store.write(snap(i)))
        backend.replace(location, truncate(backend.read(location)))
    assert backend.make(read_only=True).load_latest() is None


def test_read_only_never_writes(backend: Backend) -> None:
    backend.make().write(snap(1))
    reader = backend.make(read_only=True)
    with pytest.raises(SnapshotStoreError, match="read-only"):
        reader.write(snap(2))
    assert loaded_i(reader) == 1


def test_owners_are_separate(backend: Backend) -> None:
    a, b = backend.make(owner="broker-0", keep=1), backend.make(owner="broker-1", keep=1)
    for i in range(1, 4):
        a.write(snap(i))
        b.write(snap(10 + i))
    assert loaded_i(a) == 3 and loaded_i(b) == 13
    assert len(a.kept()) == 1 and len(b.kept()) == 1
    seen = sorted(int(s.state["i"]) for _, s in a.iter_valid(all_owners=True))
    # A directory store has one owner; a shared bucket shows every owner's snapshots.
    assert seen == ([3] if backend.kind == "local" else [3, 13])


def test_read_gives_a_kept_snapshot_s_bytes_damaged_or_not(backend: Backend) -> None:
    a, b = backend.make(owner="broker-0"), backend.make(owner="broker-1")
    good, bad = str(a.write(snap(1))), str(a.write(snap(2)))
    theirs = str(b.write(snap(3)))
    backend.replace(bad, flip(backend.read(bad)))
    reader = backend.make(owner="broker-0", read_only=True)
    assert reader.read(good) == backend.read(good)
    assert reader.read(bad) == backend.read(bad)  # unchecked: for tools that report on it
    # A directory store has one owner; a shared bucket lists every owner's, its own first.
    assert reader.kept_all_owners() == [bad, good] + ([] if backend.kind == "local" else [theirs])
    with pytest.raises(SnapshotStoreError, match="not a snapshot of"):
        reader.read(theirs.replace("snapshot-", "notes-"))
    a.close()
    if backend.kind == "s3":
        assert b.read(theirs) == backend.read(theirs)  # any owner's, in a shared bucket
        with pytest.raises(SnapshotStoreError, match="gone"):
            reader.read(theirs.replace("-00000000000000000001", "-00000000000000000009"))


def test_a_store_without_read_says_which_it_is() -> None:
    class Elsewhere(SnapshotStore):
        def write(self, snapshot: Snapshot) -> str:
            return "x"

        def load_latest(self) -> Snapshot | None:
            return None

        def kept(self) -> list[str]:
            return ["x"]

        def iter_valid(self, *, all_owners: bool = False) -> Iterator[tuple[str, Snapshot]]:
            return iter(())

    store = Elsewhere()
    assert store.kept_all_owners() == ["x"]
    with pytest.raises(NotImplementedError, match="Elsewhere"):
        store.read("x")


def test_bad_keep_is_a_config_error(backend: Backend) -> None:
    with pytest.raises(SnapshotConfigError, match="keep"):
        backend.make(keep=0)


async def test_async_helpers(backend: Backend) -> None:
    store = backend.make()
    await store.write_async(snap(5))
    assert await store.load_latest_async() == snap(5)


def test_factory_builds_each_backend(tmp_path: Path) -> None:
    local = load_snapshot_store({"directory": tmp_path, "keep": 3})
    assert isinstance(local, LocalSnapshotStore) and local.keep == 3
    # The name of the ABC still builds the directory store, as before it was an ABC.
    legacy = SnapshotStore(tmp_path, keep=2)  # type: ignore[abstract]
    assert isinstance(legacy, LocalSnapshotStore) and legacy.keep == 2
    with pytest.raises(SnapshotConfigError, match="unknown snapshot store type 'ftp'"):
        load_snapshot_store({"type": "ftp"})
    with pytest.raises(SnapshotConfigError, match="bad snapshot store settings"):
        load_snapshot_store({"type": "local", "directory": tmp_path, "colour": "red"})
    with pytest.raises(SnapshotConfigError, match="owner"):
        load_snapshot_store({"type": "s3", "client": None, "bucket": "b", "owner": "a/b"})
    with pytest.raises(SnapshotConfigError, match="prefix"):
        load_snapshot_store({"type": "s3", "client": None, "bucket": "b", "prefix": "a/../b"})
