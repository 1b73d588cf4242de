"""KafkaEventLog with Kafka's RLMM defaults on a one-broker Apache Kafka cluster.

Invariant checked: Kafka's defaults for ``__remote_log_metadata`` (replication
factor 3, 50 partitions, infinite retention) behave as an operator expects on a
cluster they do not fit: a prompt EventLogConfigError naming the property to
change (nothing created), and with the documented override the log starts.
"""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from eventlog.errors import EventLogConfigError
from eventlog.kafka import KafkaEventLog
from tests.fixtures.apache_kafka import METADATA_PARTITIONS, METADATA_TOPIC, ApacheKafkaBroker

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka]

BOOTSTRAP = "remote.log.metadata.common.client.bootstrap.servers"


async def topic_configs(bootstrap: str, topic: str) -> tuple[int, dict[str, str]] | None:
    """(partitions, configs) of ``topic``, or None when it does not exist."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            return None
        [described] = await admin.describe_topics([topic])
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        return len(described["partitions"]), {e[0]: e[1] for e in response.resources[0][4]}
    finally:
        await admin.close()


async def test_default_replication_factor_is_refused_at_once_naming_the_setting(
    apache_kafka_broker: ApacheKafkaBroker,
) -> None:
    bootstrap = apache_kafka_broker.bootstrap
    topic = f"rlmm-defaults-{uuid4().hex[:8]}"
    log = KafkaEventLog.from_properties(
        {BOOTSTRAP: bootstrap, "remote.log.metadata.topic.name": topic}
    )
    assert (log.replication_factor, log.partition_count, log.retention_ms) == (3, 50, -1)
    with pytest.raises(EventLogConfigError) as info:
        async with asyncio.timeout(15):  # a clear error, not a hang or a retry loop
            await log.start()
    await log.close()
    message = str(info.value)
    assert "remote.log.metadata.topic.replication.factor" in message and topic in message
    assert "replication_factor=3" in message and "1 broker" in message
    assert await topic_configs(bootstrap, topic) is None, "nothing is created on a refusal"

    # The documented override: the replication factor the cluster can hold.
    fixed = KafkaEventLog.from_properties(
        {
            BOOTSTRAP: bootstrap,
            "remote.log.metadata.topic.name": topic,
            "remote.log.metadata.topic.replication.factor": "1",
        }
    )
    async with fixed:
        assert fixed.topic_created
        assert await fixed.append(49, b"x") == 0
    found = await topic_configs(bootstrap, topic)
    assert found is not None
    partitions, configs = found
    assert partitions == 50
    assert configs["retention.ms"] == "-1" and configs["cleanup.policy"] == "delete"


async def test_kafkas_own_metadata_topic_needs_its_partition_count(
    apache_kafka_broker: ApacheKafkaBroker,
) -> None:
    """Read-only use of the topic Kafka's RLMM created (3 partitions here, not 50)."""
    bootstrap = apache_kafka_broker.bootstrap
    async with asyncio.timeout(60):  # Kafka's RLMM creates it soon after start
        while await topic_configs(bootstrap, METADATA_TOPIC) is None:
            await asyncio.sleep(0.2)
    log = KafkaEventLog.from_properties({BOOTSTRAP: bootstrap})
    with pytest.raises(EventLogConfigError) as info:
        async with asyncio.timeout(15):
            await log.start()
    await log.close()
    message = str(info.value)
    assert f"exists with {METADATA_PARTITIONS} partitions, expected 50" in message
    assert f"remote.log.metadata.topic.num.partitions to {METADATA_PARTITIONS}" in message

    matching = KafkaEventLog.from_properties(
        {
            BOOTSTRAP: bootstrap,
            "remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
        }
    )
    async with matching:
        assert not matching.topic_created
        ends = await matching.end_offsets(range(METADATA_PARTITIONS))
        assert all(end >= 0 for end in ends.values())
