"""`rlmm restore` from rlmm's own layout on S3 (moto's HTTP server) into Apache Kafka 4.1.1:
once with the metadata (rlmm's file event log), once from the bucket alone after the
metadata is deleted. Both targets equal the archive's committed records, partition by
partition, in order, with keys, values, headers and timestamps. Then a segment's objects
are deleted: the restore stops at the gap, naming it, with what comes before committed,
and ``--resume --skip-missing`` restores the rest. All of it twice: with the manager's
snapshots in its data dir (gone with it: the bucket's objects give every segment), and
with ``[snapshot] store = "s3"`` (the snapshot in the bucket gives them; it still
holds the lost segment, yet the restore stops at its gap: the objects listed rule)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from remote.segments import PartitionDir
from rlmm.archive import open_metadata_view
from rlmm.restore import MissingSegmentsError, RestoreOptions, RestoreSelection, restore
from tests.fixtures.apache_kafka import ApacheKafkaBroker
from tests.integration.test_restore_apache_kafka import consume
from tests.rlmm.archive.archive_data import archived, make_config, offload, write_history

pytestmark = [pytest.mark.s3, pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("snapshot_store", ["local", "s3"])
def test_restore_from_rlmms_s3_layout_with_and_without_metadata(
    s3_endpoint: str,
    apache_kafka_broker: ApacheKafkaBroker,
    tmp_path: Path,
    snapshot_store: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bucket = f"restore-{snapshot_store}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    config = make_config(
        tmp_path / "rlmm",
        **{
            "remote.type": "s3",
            "remote.bucket": bucket,
            "remote.endpoint_url": s3_endpoint,
            "snapshot.store": snapshot_store,
        },
    )
    topic = f"s3r-{uuid.uuid4().hex[:6]}"
    topic_id = uuid.uuid4()
    want = {}
    archived_0: list[tuple[Any, ...]] = []  # partition 0's, with offsets
    for p, codec in ((0, "none"), (1, "lz4")):
        pdir, written = write_history(tmp_path / "logs", topic, p, codec, topic_id=topic_id)
        want[p] = [
            (e.key, e.value, tuple(e.headers), e.timestamp, 0)
            for e in archived(pdir, written)
            if not e.aborted
        ]
        if p == 0:
            archived_0 = [
                (e.key, e.value, tuple(e.headers), e.timestamp, 0, e.offset)
                for e in archived(pdir, written)
                if not e.aborted
            ]
    dirs = [PartitionDir(d) for d in sorted((tmp_path / "logs").iterdir())]
    asyncio.run(offload(config, dirs))
    client = {"bootstrap_servers": apache_kafka_broker.bootstrap}
    with open_metadata_view(config) as view:
        tp = next(tp for tp in view.topic_partitions() if tp.partition == 0)
        lost = view.lineage(tp)[2]  # its objects go, in the last round below
    for how in ("metadata", "store"):
        if how == "store":
            # The disaster: the metadata log and its snapshots are gone, the bucket is left.
            shutil.rmtree(tmp_path / "rlmm")
        target = f"{topic}-{how}"
        # The archive's timestamps are from 2023: keep the broker's retention off them.
        asyncio.run(_create(apache_kafka_broker.bootstrap, target))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="rlmm.archive.store_view"):
            report = restore(
                config,
                RestoreSelection(topic, target_topic=target),
                client,
                from_store=how == "store",
                options=RestoreOptions(transaction_records=100),
            )
        segments = sum(p.segments for p in report.plan.partitions)
        from_snapshots = f"{segments} of {segments} segments from rlmm's snapshots"
        assert (from_snapshots in caplog.text) == (how == "store" and snapshot_store == "s3")
        assert report.plan.metadata_source == how
        assert report.records == sum(map(len, want.values()))
        assert all(r.done for r in report.results)
        got = asyncio.run(consume(apache_kafka_broker.bootstrap, target))
        assert got == want, how
        if how == "metadata":
            # The target deleted and recreated empty: its saved progress is void; a
            # --resume starts over (clearing it first) rather than skip what it claims.
            asyncio.run(_recreate(apache_kafka_broker.bootstrap, target))
            again = restore(
                config,
                RestoreSelection(topic, target_topic=target),
                client,
                options=RestoreOptions(resume=True),
            )
            assert again.cleared_progress == [0, 1] and not again.resumed
            assert asyncio.run(consume(apache_kafka_broker.bootstrap, target)) == want

    # A segment lost from the bucket: the restore stops at the gap and names it, with
    # everything before it committed; --resume --skip-missing goes on past it.
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    prefix = f"{topic}-"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    start = f"/0/{lost.start_offset:020d}-"
    for key in keys:
        if key.startswith(prefix) and start in key:
            s3.delete_object(Bucket=bucket, Key=key)
    target = f"{topic}-gap"
    asyncio.run(_create(apache_kafka_broker.bootstrap, target))
    selection = RestoreSelection(topic, target_topic=target)
    with pytest.raises(MissingSegmentsError, match=rf"{topic}-0: offsets \[{lost.start_offset}, "):
        restore(config, selection, client, from_store=True)
    got = asyncio.run(consume(apache_kafka_broker.bootstrap, target))
    before = [e for e in archived_0 if e[5] < lost.start_offset]
    assert got[0] == [e[:5] for e in before]
    assert got[1] == want[1]
    report = restore(
        config,
        RestoreSelection(topic, target_topic=target, skip_missing=True),
        client,
        from_store=True,
        options=RestoreOptions(resume=True),
    )
    assert report.resumed and all(r.done for r in report.results)
    got = asyncio.run(consume(apache_kafka_broker.bootstrap, target))
    assert got[0] == [e[:5] for e in archived_0 if not lost.start_offset <= e[5] <= lost.end_offset]


async def _recreate(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        for _ in range(100):
            if topic not in await admin.list_topics():
                break
            await asyncio.sleep(0.2)
        for _ in range(50):  # the controller may still be finishing the delete
            response = await admin.create_topics(
                [NewTopic(topic, 2, 1, topic_configs={"retention.ms": "-1"})]
            )
            if response.topic_errors[0][1] == 0:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"cannot recreate {topic}: {response.topic_errors}")
    finally:
        await admin.close()


async def _create(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "-1"})])
    finally:
        await admin.close()
