"""OffloadSettings: the ``[offload]`` config section resolved into typed values.

Invariant: a topic-level setting comes, first found, from the topic's
``[offload.topics.<topic>]`` entry, then from the cluster's config of the topic when
the cluster sets it anywhere (on the topic, or as a broker's default; Kafka's own
built-in default does not count), then from ``[offload]``; ``effective`` says where
each value came from. Kafka's internal topics are never offloaded, whatever the
configuration says, nor is ``rlmm restore``'s progress topic (``rlmm.topics``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlmm.config import BOOLEAN_OFFLOAD_SETTINGS, OFFLOAD_TOPIC_SETTINGS, RlmmConfig
from rlmm.errors import ConfigError
from rlmm.offload.log_source import RetentionSettings
from rlmm.offload.quota import UNLIMITED, CopyQuota
from rlmm.topics import INTERNAL_TOPICS


@dataclass(frozen=True)
class OffloadSettings:
    """Broker-level offloader settings and per-topic retention."""

    defaults: RetentionSettings = field(default_factory=RetentionSettings)
    topics: Mapping[str, RetentionSettings] = field(default_factory=dict)
    # the [offload] values and each topic's own entries, as written (for ``effective``)
    section: Mapping[str, Any] = field(default_factory=dict)
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    task_interval_ms: int = 30_000
    copier_concurrency: int = 4
    verify_crc: bool = True
    leadership_poll_ms: int = 5_000
    topic_configs_refresh_ms: int = 300_000  # each topic's configs read again for the store
    copy_max_bytes_per_second: int = UNLIMITED  # KIP-956, one budget for all partitions
    copy_quota_window_num: int = 11
    copy_quota_window_size_s: int = 1
    # Kafka client settings for the cluster (bootstrap.servers, security), when the
    # event log is not Kafka; empty: the event log's, or no cluster.
    cluster_client: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: RlmmConfig) -> OffloadSettings:
        section = dict(config.offload)
        overrides: Mapping[str, Mapping[str, Any]] = section.pop("topics", {})
        client: Mapping[str, str] = section.pop("cluster", {})
        defaults = _retention(section)
        return cls(
            defaults=defaults,
            topics={t: _retention({**section, **values}) for t, values in overrides.items()},
            section={k: section[k] for k in OFFLOAD_TOPIC_SETTINGS},
            overrides={t: dict(values) for t, values in overrides.items()},
            task_interval_ms=int(section["remote.log.manager.task.interval.ms"]),
            copier_concurrency=int(section["remote.log.manager.copier.thread.pool.size"]),
            verify_crc=bool(section["verify.crc"]),
            leadership_poll_ms=int(section["leadership.poll.ms"]),
            topic_configs_refresh_ms=int(section["topic.configs.refresh.ms"]),
            copy_max_bytes_per_second=int(section["remote.log.manager.copy.max.bytes.per.second"]),
            copy_quota_window_num=int(section["remote.log.manager.copy.quota.window.num"]),
            copy_quota_window_size_s=int(
                section["remote.log.manager.copy.quota.window.size.seconds"]
            ),
            cluster_client=dict(client),
        )

    def copy_quota(self) -> CopyQuota:
        """The sidecar's one copy budget (KIP-956)."""
        return CopyQuota(
            self.copy_max_bytes_per_second,
            window_num=self.copy_quota_window_num,
            window_size_s=self.copy_quota_window_size_s,
        )

    def retention_for(self, topic: str) -> RetentionSettings:
        return self.topics.get(topic, self.defaults)

    def effective(
        self, topic: str, cluster: Mapping[str, str] | None = None
    ) -> tuple[RetentionSettings, dict[str, str]]:
        """``topic``'s settings with the cluster's topic configs (``cluster``: the
        values the cluster sets, by Kafka name), and where each came from."""
        values: dict[str, Any] = {}
        origins: dict[str, str] = {}
        own = self.overrides.get(topic, {})
        for name in OFFLOAD_TOPIC_SETTINGS:
            if name in own:
                values[name], origins[name] = own[name], f"offload.topics.{topic}"
            elif cluster is not None and name in cluster:
                values[name], origins[name] = _parse(name, cluster[name]), "cluster"
            else:
                values[name], origins[name] = self.section[name], "offload"
        return _retention(values), origins

    def offloads(self, topic: str) -> bool:
        """True when ``topic`` is tiered: not internal (Kafka's or rlmm's own) and
        ``remote.storage.enable``."""
        return topic not in INTERNAL_TOPICS and self.retention_for(topic).remote_storage_enable


def _retention(values: Mapping[str, Any]) -> RetentionSettings:
    return RetentionSettings(
        retention_ms=int(values["retention.ms"]),
        retention_bytes=int(values["retention.bytes"]),
        local_retention_ms=int(values["local.retention.ms"]),
        local_retention_bytes=int(values["local.retention.bytes"]),
        remote_storage_enable=bool(values["remote.storage.enable"]),
        remote_log_copy_disable=bool(values["remote.log.copy.disable"]),
        remote_log_delete_on_disable=bool(values["remote.log.delete.on.disable"]),
        remote_copy_lag_ms=int(values["remote.copy.lag.ms"]),
        remote_copy_lag_bytes=int(values["remote.copy.lag.bytes"]),
    )


def _parse(name: str, text: str) -> bool | int:
    """A topic config's value as the cluster sends it (a string)."""
    if name in BOOLEAN_OFFLOAD_SETTINGS:
        return text.strip().lower() == "true"
    try:
        return int(text)
    except ValueError as e:
        raise ConfigError(f"the cluster's {name} = {text!r} is not an integer") from e


__all__ = ["INTERNAL_TOPICS", "OffloadSettings"]
