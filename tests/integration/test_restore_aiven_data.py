"""The committed Aiven plugin data (three variants: chunked zstd, plain, encrypted) from
the bucket alone: the segments rebuilt from the objects equal the ones Kafka's RLMM
recorded, and the restore's plan reads exactly what a read_committed consumer read
through the broker."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from rlmm.archive import close_remote_storage, open_metadata_view, remote_storage_for
from rlmm.archive.reader import read_slice
from rlmm.config import load_config
from rlmm.restore import RestoreSelection, build_plan, store_metadata_view
from tests.integration.test_aiven_plugin_data import cluster, expected_rows

pytestmark = [pytest.mark.s3]
__all__ = ["cluster"]  # the fixture, imported for pytest


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def fields(metadata: Any) -> tuple[Any, ...]:
    m = metadata
    return (
        m.remote_log_segment_id, m.start_offset, m.end_offset, m.max_timestamp_ms,
        m.segment_size_in_bytes, dict(m.segment_leader_epochs), m.txn_index_empty,
    )  # fmt: skip


@pytest.mark.timeout(120)
def test_the_bucket_alone_gives_kafkas_segments_and_the_committed_records(
    cluster: dict[str, Any],
) -> None:
    config = load_config(cluster["config"])
    options = config.remote_options()
    try:
        layout = remote_storage_for(options)
        view, listing = store_metadata_view(layout, ["orders"])
        assert listing.skipped == [] and listing.topics == {"orders"}
        with open_metadata_view(config) as recorded:
            assert view.topic_partitions() == recorded.topic_partitions()
            for tp in recorded.topic_partitions():
                assert [fields(m) for m in view.lineage(tp)] == [
                    fields(m) for m in recorded.lineage(tp)
                ]
        plan = build_plan(
            view, layout, options, RestoreSelection("orders"), metadata_source="store"
        )
        rows = []
        for part in plan.partitions:
            for piece in part.slices:
                for batch in read_slice(piece):
                    for r in batch.to_pylist():
                        rows.append((
                            r["partition"], r["offset"], int(r["timestamp"].timestamp() * 1000),
                            r["timestampType"], b64(r["key"]), b64(r["value"]),
                            [[h["key"], b64(h["value"])] for h in r["headers"] or []],
                        ))  # fmt: skip
        assert sorted(rows) == expected_rows(cluster["records"]["read_committed"])
    finally:
        close_remote_storage()
