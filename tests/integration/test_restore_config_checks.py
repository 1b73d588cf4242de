"""A restore's target configs checked against Apache Kafka 4.1.1 before anything is
written, and the offset map of a restore that starts over, in rlmm's own layout.

The topic's configs are the object `rlmm offload` keeps (``remote.topic_configs``),
written here as it would be. Invariants checked: ``min.insync.replicas`` above the
replication factor a one-broker target gets, and a config the target's Kafka does not
know (its own validate-only check), are each a TopicConfigError naming the remedy, with
nothing created or written, in a dry run too; an override takes the target through, with
the other kept configs set on the topic; ``--no-topic-configs`` creates it with the
cluster's defaults; restored again after its target was deleted, the old map is cleared
and every source offset translates through the new one to the same record.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from remote.segments import PartitionDir
from remote.topic_configs import TopicConfigs
from rlmm.factory import open_topic_config_store
from rlmm.model import kafka_uuid_to_str
from rlmm.restore import (
    RestoreOptions,
    RestoreReport,
    RestoreSelection,
    TopicConfigError,
    read_offset_map,
    read_progress,
    restore,
)
from tests.fixtures.apache_kafka import ApacheKafkaBroker
from tests.integration.test_restore_apache_kafka import topics
from tests.integration.test_restore_fallbacks import _lands_on_the_same_records, write
from tests.integration.test_restore_topic_configs import topic_configs
from tests.rlmm.archive.archive_data import make_config, offload

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow]

KEPT = {"min.insync.replicas": "2", "retention.ms": "-1", "segment.ms": "600000",
        "remote.storage.enable": "true"}  # fmt: skip


async def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()
    deadline = time.monotonic() + 60
    while topic in await topics(bootstrap):
        assert time.monotonic() < deadline, f"{topic} not deleted in 60 s"
        await asyncio.sleep(0.2)


@pytest.mark.timeout(300)
def test_configs_are_checked_first_and_a_restore_over_again_gets_a_new_map(
    apache_kafka_broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    bootstrap = apache_kafka_broker.bootstrap
    client = {"bootstrap_servers": bootstrap}
    topic = f"cc-{uuid.uuid4().hex[:6]}"
    want, offsets = write(tmp_path / "logs", topic)
    config = make_config(tmp_path / "rlmm")
    dirs = [PartitionDir(d) for d in sorted((tmp_path / "logs").iterdir())]
    copied = asyncio.run(offload(config, dirs))
    topic_id = kafka_uuid_to_str(next(iter(copied)).topic_id)
    store = open_topic_config_store(config)
    assert store is not None
    store.write(TopicConfigs(topic, topic_id, KEPT, 1))
    target = f"{topic}-t"

    def run(**options: Any) -> RestoreReport:
        return restore(config, RestoreSelection(topic, target_topic=target), client,
                       options=RestoreOptions(**options))  # fmt: skip

    for dry_run in (True, False):
        with pytest.raises(TopicConfigError) as info:
            run(dry_run=dry_run)
        assert str(info.value) == (
            f"target topic {target!r} would be created with replication factor 1 (min(3, the"
            " cluster's broker)) and min.insync.replicas=2 (the source's): no acks=all write,"
            " the restore's own included, would succeed; pass --topic-config"
            " min.insync.replicas=1, or restore into a cluster of 2 or more brokers"
        )
    unknown = {"min.insync.replicas": "1", "no.such.config": "1"}
    with pytest.raises(TopicConfigError, match=r"refuses to create topic .*error code 40 .*"
                       r"--topic-config NAME=VALUE, or pass --no-topic-configs"):  # fmt: skip
        run(topic_config_overrides=unknown)
    assert target not in asyncio.run(topics(bootstrap))
    assert asyncio.run(read_progress(client, target, 1)) == {}

    report = run(transaction_records=20, topic_config_overrides={"min.insync.replicas": "1"})
    choice = report.topic_configs
    assert choice is not None and report.created_target
    assert choice.applied == {"min.insync.replicas": "1", "retention.ms": "-1",
                              "segment.ms": "600000"}  # fmt: skip
    assert list(choice.not_copied) == ["remote.storage.enable"]
    described = asyncio.run(topic_configs(bootstrap, target))
    for name, value in (("min.insync.replicas", "1"), ("retention.ms", "-1"),
                        ("segment.ms", "600000")):  # fmt: skip
        assert described[name] == (value, 1), name
    _lands_on_the_same_records(client, target, want, offsets, "first")

    other = restore(config, RestoreSelection(topic, target_topic=f"{target}-plain"), client,
                    options=RestoreOptions(topic_configs=False))  # fmt: skip
    assert other.topic_configs is not None and other.topic_configs.applied == {}
    assert other.topic_configs.found == "not read (--no-topic-configs)"
    plain = asyncio.run(topic_configs(bootstrap, f"{target}-plain"))
    assert plain["retention.ms"][1] != 1 and plain["segment.ms"][1] != 1

    # The target deleted, restored again in transactions of another size: the old map
    # (other keys) is cleared first, and the new one alone translates.
    asyncio.run(delete_topic(bootstrap, target))
    again = run(transaction_records=7, topic_config_overrides={"min.insync.replicas": "1"})
    assert again.cleared_progress == [0, 1]
    mapped = asyncio.run(read_offset_map(client, target))
    assert sum(len(runs) for runs in mapped.runs.values()) >= 2
    _lands_on_the_same_records(client, target, want, offsets, "again")
