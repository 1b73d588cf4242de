"""open_archive_view: the view every reader reads. From the metadata log, or with
``from_store`` from the remote store alone (with rlmm's snapshots where they survive),
both giving the same segments; a metadata log that cannot be read, or that lists
nothing beside a store of segments, is an error carrying the remedy; a local store
that does not exist is named, never created."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from rlmm.archive import (
    ArchiveError,
    EmptyViewError,
    MetadataLogUnavailableError,
    MetadataView,
    open_archive_view,
    open_store_view,
)
from rlmm.config import RlmmConfig, load_config
from rlmm.errors import ConfigError
from rlmm.factory import open_event_log
from tests.rlmm.archive.archive_data import make_config, offload, write_history


@pytest.fixture
def archived(tmp_path: Path) -> RlmmConfig:
    """Topic ``t``, two partitions with two leader epochs and transactions, offloaded
    through the manager (which snapshots as it stops)."""
    config = make_config(tmp_path / "rlmm")
    topic_id = uuid.uuid4()
    dirs = [write_history(tmp_path / "logs", "t", p, topic_id=topic_id)[0] for p in (0, 1)]
    asyncio.run(offload(config, dirs))
    return config


def lineage(view: MetadataView) -> dict[Any, list[tuple[Any, ...]]]:
    """Each partition's lineage, as much of each segment as the store alone can say."""
    return {
        tp: [
            (
                m.remote_log_segment_id, m.start_offset, m.end_offset, m.max_timestamp_ms,
                m.segment_size_in_bytes, dict(m.segment_leader_epochs), m.txn_index_empty,
                m.state,
            )
            for m in view.lineage(tp)
        ]
        for tp in view.topic_partitions()
    }  # fmt: skip


def lose_the_log(config: RlmmConfig, *, snapshots: bool = True) -> None:
    shutil.rmtree(config.event_log_options()["dir"])
    if snapshots:
        shutil.rmtree(config.snapshot_dir())


def empty_log(config: RlmmConfig) -> None:
    async def create() -> None:
        log = open_event_log(config)
        await log.start()
        await log.close()

    asyncio.run(create())


@pytest.mark.parametrize("snapshots_survive", [False, True])
def test_the_store_alone_gives_the_metadata_s_segments(
    archived: RlmmConfig, snapshots_survive: bool
) -> None:
    with open_archive_view(archived) as view:
        want = lineage(view)
    assert len(want) == 2 and all(len(segments) > 2 for segments in want.values())
    lose_the_log(archived, snapshots=not snapshots_survive)
    with open_archive_view(archived, from_store=True) as alone:
        assert lineage(alone) == want
    with open_archive_view(archived, from_store=True, topics=["t"]) as one_topic:
        assert lineage(one_topic) == want
    _, listing = open_store_view(archived)
    # where the manager's snapshot survives, it gives every copy (no object read)
    expected = sum(map(len, want.values())) if snapshots_survive else 0
    assert listing.from_snapshot == expected and listing.skipped == []


def test_a_lost_metadata_log_names_itself_its_config_and_the_remedy(
    archived: RlmmConfig, tmp_path: Path
) -> None:
    lose_the_log(archived)
    with pytest.raises(MetadataLogUnavailableError) as caught:
        open_archive_view(archived)
    message = str(caught.value)
    log_dir = archived.event_log_options()["dir"]
    assert message.startswith(f"cannot read the remote log metadata from FileEventLog({log_dir!r}")
    assert "[eventlog] settings, no config file" in message  # make_config: no file
    assert message.endswith("; to read the archive from the remote store alone: from_store=True")
    assert caught.value.with_remedy("--from-store").endswith("remote store alone: --from-store")
    # with a config file, the file is named
    toml = tmp_path / "rlmm.toml"
    toml.write_text(f'data_dir = "{archived.data_dir}"\n')
    with pytest.raises(MetadataLogUnavailableError, match=rf"\[eventlog\] of {toml}\)"):
        open_archive_view(load_config(toml, env={}))


def test_an_empty_metadata_log_beside_a_store_of_segments_is_an_error(
    archived: RlmmConfig, tmp_path: Path
) -> None:
    """Before, the view was empty and every reader reported an empty archive."""
    lose_the_log(archived)
    empty_log(archived)
    root = Path(archived.remote_options()["root"])
    objects = sum(1 for p in root.rglob("*") if p.is_file())
    with pytest.raises(EmptyViewError) as caught:
        open_archive_view(archived)
    message = str(caught.value)
    assert f"LocalRemoteStorageManager(root={str(root)!r}) holds {objects} objects" in message
    assert caught.value.remedy_applies and message.endswith("remote store alone: from_store=True")
    # An empty store beside an empty log is an empty archive, not an error; and a store
    # root that does not exist is not created by looking.
    for remote in (tmp_path / "empty", tmp_path / "absent"):
        if remote.name == "empty":
            remote.mkdir()
        elsewhere = dataclasses.replace(archived, remote={"root": str(remote)})
        with open_archive_view(elsewhere) as view:
            assert view.topic_partitions() == []
    assert not (tmp_path / "absent").exists()


def test_a_store_of_no_whole_copy_is_an_error_without_the_remedy(archived: RlmmConfig) -> None:
    lose_the_log(archived)
    root = Path(archived.remote_options()["root"])
    for index in root.rglob("*.timeindex"):
        index.unlink()
    with pytest.raises(EmptyViewError) as caught:
        open_archive_view(archived, from_store=True)
    message = str(caught.value)
    assert not caught.value.remedy_applies and "from_store" not in message
    assert "none of them is a finished copy" in message and "(no TIMESTAMP" in message, message


def test_unknown_topics_and_roots_are_named(archived: RlmmConfig, tmp_path: Path) -> None:
    lose_the_log(archived)
    with pytest.raises(
        ArchiveError, match=r"unknown topic 'u': no object of it in .* \(known: t\)"
    ):
        open_archive_view(archived, from_store=True, topics=["u"])
    wrong = tmp_path / "not-the-store"
    moved = dataclasses.replace(archived, remote={"root": str(wrong)})
    with pytest.raises(ConfigError, match=rf"\[remote\] root {str(wrong)!r} does not exist"):
        open_archive_view(moved, from_store=True)
    assert not wrong.exists()
