"""The target cluster's side of a restore: topics, partition counts, committed data.

Job: through one aiokafka admin client, describe topics without creating them (a
metadata request for all topics: a request naming a missing topic may auto-create
it), create the target (with its configs, which Kafka checks first: ``refusal``) and
the progress topic, read the target's largest accepted batch (``max.message.bytes``),
and find whether a topic holds any committed record (read_committed, stopping at the
first one).

Invariants: nothing here writes a record; a topic is created only by
``create_topic`` (an existing one is left as it is: a racing creator is not an
error); every client opened is closed before the call returns, also on error; a
Kafka error leaves as TargetClusterError naming the topic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from rlmm.restore.errors import TargetClusterError
from rlmm.restore.progress import committed_reader

_TOPIC_ALREADY_EXISTS = 36
_MAX_MESSAGE_BYTES = "max.message.bytes"
_SCAN_TIMEOUT_S = 60.0


class TargetCluster:
    """Admin calls on the target cluster (``async with``: started and closed)."""

    def __init__(self, client: Mapping[str, Any]) -> None:
        self.client = dict(client)
        self._admin = AIOKafkaAdminClient(**self.client, client_id="rlmm-restore-admin")
        self._started = False

    async def __aenter__(self) -> TargetCluster:
        try:
            await self._admin.start()
        except KafkaError as e:
            await self._admin.close()
            raise TargetClusterError(
                f"cannot reach the target cluster at {self.client.get('bootstrap_servers')}: {e}"
            ) from e
        self._started = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self._admin.close()

    async def partition_counts(self) -> dict[str, int]:
        """Every topic of the cluster with its partition count."""
        try:
            topics = await self._admin.describe_topics()
        except KafkaError as e:
            raise TargetClusterError(f"cannot list the target cluster's topics: {e}") from e
        return {t["topic"]: len(t["partitions"]) for t in topics if t["error_code"] == 0}

    async def broker_count(self) -> int:
        try:
            return len((await self._admin.describe_cluster())["brokers"])
        except KafkaError as e:
            raise TargetClusterError(f"cannot describe the target cluster: {e}") from e

    async def create_topic(
        self, topic: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> bool:
        """Create ``topic`` (replication factor min(3, brokers)); False if it existed."""
        replication = min(3, await self.broker_count())
        new = NewTopic(topic, partitions, replication, topic_configs=dict(configs or {}))
        try:
            response = await self._admin.create_topics([new])
        except KafkaError as e:
            raise TargetClusterError(f"cannot create topic {topic!r}: {e}") from e
        for item in response.topic_errors:
            code = item[1]
            if code == _TOPIC_ALREADY_EXISTS:
                return False
            if code != 0:
                message = item[2] if len(item) > 2 else ""
                raise TargetClusterError(
                    f"cannot create topic {topic!r}: error code {code} {message or ''}".rstrip()
                )
        # Metadata reaches every broker shortly after the controller answers.
        for _ in range(100):
            if topic in await self.partition_counts():
                return True
            await asyncio.sleep(0.1)
        raise TargetClusterError(f"topic {topic!r} was created but never showed in the metadata")

    async def refusal(self, topic: str, partitions: int, configs: Mapping[str, str]) -> str | None:
        """Why the cluster would refuse to create ``topic`` with ``configs`` (Kafka's
        own check, CreateTopics with validate_only: nothing is created), or None."""
        replication = min(3, await self.broker_count())
        new = NewTopic(topic, partitions, replication, topic_configs=dict(configs))
        try:
            response = await self._admin.create_topics([new], validate_only=True)
        except KafkaError as e:
            raise TargetClusterError(f"cannot check topic {topic!r}'s configs: {e}") from e
        for item in response.topic_errors:
            code = item[1]
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                message = item[2] if len(item) > 2 else ""
                return f"error code {code} {message or ''}".rstrip()
        return None

    async def max_message_bytes(self, topic: str) -> int:
        """``topic``'s max.message.bytes: the largest record batch its brokers accept."""
        wanted = ConfigResource(ConfigResourceType.TOPIC, topic, {_MAX_MESSAGE_BYTES: None})
        try:
            responses = await self._admin.describe_configs([wanted])
        except KafkaError as e:
            raise TargetClusterError(f"cannot describe topic {topic!r}'s configs: {e}") from e
        for response in responses:
            for error_code, message, _, name, entries in response.resources:
                if name != topic:
                    continue
                if error_code != 0:
                    raise TargetClusterError(
                        f"cannot describe topic {topic!r}'s configs: error code {error_code}"
                        f" {message or ''}".rstrip()
                    )
                for entry in entries:
                    if entry[0] == _MAX_MESSAGE_BYTES and entry[1] is not None:
                        return int(entry[1])
        raise TargetClusterError(f"topic {topic!r} has no {_MAX_MESSAGE_BYTES} in its configs")

    async def committed_record(self, topic: str, partitions: int) -> tuple[int, int] | None:
        """(partition, offset) of a committed record of ``topic``, or None when it has
        none (aborted records and transaction markers are not data)."""
        consumer = committed_reader(self.client, "rlmm-restore-check")
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        try:
            async with asyncio.timeout(_SCAN_TIMEOUT_S):
                await consumer.start()
                consumer.assign(tps)
                ends = await consumer.end_offsets(tps)
                starts = await consumer.beginning_offsets(tps)
                todo = [tp for tp in tps if ends[tp] > starts[tp]]
                if not todo:
                    return None
                # A position moves as getmany hands records out, and past what
                # read_committed skips: the scan ends at the stable end.
                while todo := [tp for tp in todo if await consumer.position(tp) < ends[tp]]:
                    batches = await consumer.getmany(*todo, timeout_ms=500)
                    for tp, records in batches.items():
                        for record in records:
                            if record.offset < ends[tp]:
                                return tp.partition, record.offset
                return None
        except TimeoutError as e:
            raise TargetClusterError(
                f"looking for committed records in {topic!r} took longer than {_SCAN_TIMEOUT_S}s"
            ) from e
        except KafkaError as e:
            raise TargetClusterError(f"cannot read topic {topic!r}: {e}") from e
        finally:
            await consumer.stop()


__all__ = ["TargetCluster"]
