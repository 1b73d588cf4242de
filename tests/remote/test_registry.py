"""The remote registry: every remote.type's classes load and answer as the table says, and
the one name parser reads back what each layout's naming builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.layouts import RemoteLayout
from remote.layouts.aiven_s3 import NAMING as AIVEN_NAMING
from remote.layouts.local_tiered_storage import NAMING as LTS_NAMING
from remote.naming import LOG_LABEL, RLMM_NAMING, SUFFIXES, SegmentNaming
from remote.registry import (
    READ_ONLY_TYPES,
    REMOTE_TYPES,
    check_remote_options,
    detect_layouts,
    known_options,
    load_remote_layout,
    load_remote_storage_manager,
)
from remote.storage import RemoteStorageManager
from rlmm.errors import ConfigError
from rlmm.model import kafka_uuid_to_str
from tests.remote.conftest import make_metadata


@pytest.mark.parametrize("name", list(REMOTE_TYPES))
def test_every_type_names_classes_of_the_right_kind(name: str) -> None:
    entry = REMOTE_TYPES[name]
    assert issubclass(entry.layout_class(), RemoteLayout)
    if entry.read_only:
        assert entry.layout_class().type_name == name
    else:
        assert issubclass(entry.storage_manager_class(), RemoteStorageManager)
        assert entry.known_options()
    assert entry.signature


def test_read_only_types_are_the_ones_without_a_writer() -> None:
    assert set(READ_ONLY_TYPES) == {"local-tiered-storage", "aiven-s3"}
    assert known_options("local") == {"root", "fsync"}
    assert known_options("local-tiered-storage") == {"dir"}
    assert known_options("aiven-s3") is None  # open-ended: the plugin's own names
    for kind in READ_ONLY_TYPES:
        with pytest.raises(ConfigError, match="never copies into it"):
            load_remote_storage_manager({"type": kind})


def test_the_layout_of_a_written_type_is_named_by_its_type(tmp_path: Path) -> None:
    with load_remote_layout({"type": "local", "root": str(tmp_path)}) as layout:
        assert layout.type_name == "local"


def test_unknown_types_list_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown remote\.type 'nfs' .*'aiven-s3'"):
        check_remote_options({"type": "nfs"})
    with pytest.raises(ConfigError, match=r"'nfs' .*entry points of rlmm\.remote_stores: none"):
        load_remote_storage_manager({"type": "nfs"})


def test_signatures_come_from_the_table() -> None:
    found = detect_layouts(["a.rsm-manifest", "b.leader-epoch-checkpoint", "c.txt"])
    assert found == {("aiven-s3",): "a.rsm-manifest", ("local", "s3"): "b.leader-epoch-checkpoint"}


@pytest.mark.parametrize(
    ("naming", "prefix"),
    [
        (RLMM_NAMING, "orders-{topic_id}/3/"),
        (LTS_NAMING, "orders-3-{topic_id}/"),
        (AIVEN_NAMING, "orders-{topic_id}/3/"),
    ],
)
def test_one_parser_reads_back_every_layout_s_names(naming: SegmentNaming, prefix: str) -> None:
    metadata = make_metadata(partition=3, start_offset=42)
    topic_id = kafka_uuid_to_str(metadata.topic_id_partition.topic_id)
    segment_id = kafka_uuid_to_str(metadata.remote_log_segment_id.id)
    assert naming.partition_prefix(metadata.topic_id_partition) == prefix.format(topic_id=topic_id)
    for suffix, label in naming.labels.items():
        parsed = naming.parse(naming.base_name(metadata) + suffix)
        assert parsed is not None
        assert (parsed.topic, parsed.partition, parsed.start_offset) == ("orders", 3, 42)
        assert (parsed.topic_id, parsed.segment_id) == (topic_id, segment_id)
        assert (parsed.suffix, parsed.label, parsed.temporary) == (suffix, label, False)
        assert naming.parse(naming.base_name(metadata) + suffix + ".bak") is None
    assert naming.parse("orders/3/x.log") is None


def test_only_rlmm_s_layout_has_temp_files() -> None:
    metadata = make_metadata()
    log = RLMM_NAMING.base_name(metadata) + SUFFIXES[None]
    temp = log.replace("/00000", "/.00000") + ".0123abcd.tmp"
    parsed = RLMM_NAMING.parse(temp)
    assert parsed is not None and parsed.temporary and parsed.label == LOG_LABEL
    assert RLMM_NAMING.parse(log.replace("/00000", "/.00000")) is None  # a dot, no temp tail
    assert AIVEN_NAMING.parse(temp) is None
