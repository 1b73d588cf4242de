"""Moving consumer groups to a restored topic: source offsets through the offset map.

Job: read the committed offset map of a target topic (``rlmm.restore.offset_map``) and
the restore's progress from the target cluster, take the source offsets to translate
(given, read from Kafka's offsets CSV, or a group's committed offsets in a cluster) and
translate each; the result carries the CSV that ``kafka-consumer-groups --reset-offsets
--from-file`` takes, naming the target topic.

Invariants: nothing is written and no group is joined (a group's committed offsets are
read with an admin call); every client opened is closed before the call returns; a
partition whose restore is not done translates only offsets its committed map reaches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from rlmm.restore.errors import RestoreInputError, TargetClusterError
from rlmm.restore.offset_map import (
    OFFSETS_TOPIC,
    MapRecord,
    OffsetMap,
    Translation,
    map_prefix,
    parse_offsets_csv,
    reset_csv,
)
from rlmm.restore.progress import PROGRESS_TOPIC, read_committed_keys, read_progress
from rlmm.restore.target import TargetCluster


@dataclass
class OffsetTranslations:
    """Source offsets of one restored topic, translated (``rlmm restore-offsets``)."""

    target_topic: str
    source_topic: str
    topic_id: str
    offsets_topic: str
    translations: list[Translation] = field(default_factory=list)
    group: str | None = None  # whose committed offsets these were
    done: bool = True  # every partition's restore is complete
    bootstrap_servers: str = ""  # the target cluster's

    def csv(self) -> str:
        """``kafka-consumer-groups --reset-offsets --from-file``'s input (target topic)."""
        return reset_csv(self.translations)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_topic": self.target_topic,
            "source_topic": self.source_topic,
            "topic_id": self.topic_id,
            "offsets_topic": self.offsets_topic,
            "group": self.group,
            "done": self.done,
            "translations": [t.to_dict() for t in self.translations],
            "csv": self.csv(),
        }


async def read_offset_map(
    client: Mapping[str, Any], target_topic: str, *, topic: str = OFFSETS_TOPIC
) -> OffsetMap:
    """The committed offset map of ``target_topic`` (empty when none was written)."""
    async with TargetCluster(client) as cluster:
        partitions = (await cluster.partition_counts()).get(topic, 0)
    found = await read_committed_keys(
        client, topic, partitions, map_prefix(target_topic), what="the offset map"
    )
    records = [MapRecord.decode(k, v) for k, v in sorted(found.items())]
    return OffsetMap.from_records(target_topic, records)


async def group_offsets(client: Mapping[str, Any], group: str, topic: str) -> list[tuple[int, int]]:
    """(partition, committed offset) of ``group`` for ``topic`` in the cluster ``client``
    reaches (an admin call: the group is not joined)."""
    admin = AIOKafkaAdminClient(**client, client_id="rlmm-restore-offsets")
    try:
        await admin.start()
        committed = await admin.list_consumer_group_offsets(group)
    except KafkaError as e:
        raise TargetClusterError(
            f"cannot read the committed offsets of group {group!r} at"
            f" {client.get('bootstrap_servers')}: {e}"
        ) from e
    finally:
        await admin.close()
    return sorted(
        (tp.partition, meta.offset)
        for tp, meta in committed.items()
        if tp.topic == topic and meta.offset >= 0
    )


async def translate_offsets(
    client: Mapping[str, Any],
    target_topic: str,
    *,
    offsets: Sequence[tuple[int, int]] | None = None,
    offsets_csv: tuple[str, str] | None = None,
    group: str | None = None,
    group_client: Mapping[str, Any] | None = None,
    source_topic: str | None = None,
    offsets_topic: str = OFFSETS_TOPIC,
    progress_topic: str = PROGRESS_TOPIC,
) -> OffsetTranslations:
    """Translate ``offsets`` ((source partition, offset) pairs), the source topic's lines
    of ``offsets_csv`` ((Kafka's offsets CSV text, where it came from)), or ``group``'s
    committed offsets of the source topic in the cluster ``group_client`` reaches
    (default: the target's), through ``target_topic``'s offset map.

    RestoreInputError when the target has no map (or a map of another source than
    ``source_topic``), or the group commits nothing of the source topic."""
    found = await read_offset_map(client, target_topic, topic=offsets_topic)
    if found.source_topic is None or found.topic_id is None:
        raise RestoreInputError(
            f"no offset map of target topic {target_topic!r} in {offsets_topic!r} at"
            f" {client.get('bootstrap_servers')}: it was not restored by rlmm into this"
            " cluster, or with --partitioner murmur2 (records re-spread by key keep no"
            " per-partition offsets), or by an rlmm before the map (pass --offsets-topic if"
            " the restore used another)"
        )
    source = found.source_topic
    if source_topic is not None and source_topic != source:
        raise RestoreInputError(
            f"target topic {target_topic!r} holds a restore of {source!r}, not of {source_topic!r}"
        )
    if offsets_csv is not None:
        text, where_csv = offsets_csv
        offsets = parse_offsets_csv(text, source, where_csv)
        if not offsets:
            raise RestoreInputError(f"{where_csv} holds no offset of topic {source!r}")
    if group is not None:
        where = group_client if group_client is not None else client
        offsets = await group_offsets(where, group, source)
        if not offsets:
            raise RestoreInputError(
                f"group {group!r} has no committed offset of topic {source!r} at"
                f" {where.get('bootstrap_servers')} (pass --group-bootstrap-server for the"
                " cluster that holds them, or give the offsets with --offset or --from-file)"
            )
    if not offsets:
        raise RestoreInputError(
            "no source offset to translate: pass --group, --offset or --from-file"
        )
    async with TargetCluster(client) as cluster:
        size = (await cluster.partition_counts()).get(progress_topic, 0)
    progress = await read_progress(client, target_topic, size, topic=progress_topic)
    out = OffsetTranslations(
        target_topic, source, found.topic_id, offsets_topic, group=group,
        bootstrap_servers=str(client.get("bootstrap_servers", "")),
    )  # fmt: skip
    for partition, offset in sorted(offsets):
        saved = progress.get(partition)
        out.translations.append(
            found.translate(
                partition,
                offset,
                first_offset=saved.first_offset if saved is not None else None,
                end_offset=saved.end_offset if saved is not None else None,
                done=saved is not None and saved.done,
            )
        )
    out.done = all(p.done for p in progress.values())
    return out


__all__ = [
    "OffsetTranslations",
    "group_offsets",
    "read_offset_map",
    "translate_offsets",
]
