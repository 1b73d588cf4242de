"""Which configs a restore creates its target topic with, and why not the others.

Job: from the configs `rlmm offload` kept for the source topic id in rlmm's store
(``remote.topic_configs``: the configs set on the topic itself, not the source brokers'
defaults), the run's ``--topic-config`` overrides and ``--no-topic-configs``, choose
the configs a new target topic is created with (``TopicConfigChoice``), naming each
stored config left out and why.

Left out of what is stored (an override sets any of them all the same):
- ``NOT_COPIED``: tiering (whether and how the target tiers is the target cluster's
  decision; Kafka refuses ``remote.storage.enable=true`` where tiering is off), and
  replication throttles (they name the source cluster's brokers);
- ``SET_AFTER``: configs that would change or refuse the restored records themselves
  (``message.timestamp.type=LogAppendTime`` stamps each with the restore's time;
  ``message.timestamp.before.max.ms`` refuses records older than it): the summary gives
  the ``kafka-configs`` command that sets them once the restore is done.

Invariants: the choice is a pure function of what is stored and the run's options, made
and checked against the target cluster (``target_configs``) before anything is written,
the same in a dry run; it applies only to a target the restore creates (an existing
topic's configs are never altered).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remote.errors import TopicConfigsError
from remote.topic_configs import TopicConfigs
from rlmm.restore.errors import TopicConfigError
from rlmm.restore.target import TargetCluster

_TIERING = "tiering: the target cluster decides whether it tiers the topic"
_BROKERS = "names the source cluster's brokers"
NOT_COPIED: Mapping[str, str] = {
    "remote.storage.enable": _TIERING,
    "local.retention.ms": _TIERING,
    "local.retention.bytes": _TIERING,
    "remote.log.copy.disable": _TIERING,
    "remote.log.delete.on.disable": _TIERING,
    # KIP-1241's delay of the copy (Kafka 4.4): an older target refuses the names
    "remote.copy.lag.ms": _TIERING,
    "remote.copy.lag.bytes": _TIERING,
    "leader.replication.throttled.replicas": _BROKERS,
    "follower.replication.throttled.replicas": _BROKERS,
}
_OLD_REFUSED = "the target would refuse the older restored records"
SET_AFTER: Mapping[str, str] = {
    "message.timestamp.before.max.ms": _OLD_REFUSED,
    "message.timestamp.difference.max.ms": _OLD_REFUSED,  # Kafka 3.x's name
}
_LOG_APPEND_TIME = "stamps every restored record with the restore's time"

# (topic, topic id) -> the configs kept for it, or None, and where they are (or why none)
ConfigLookup = Callable[[str, str], tuple[TopicConfigs | None, str]]


@dataclass(frozen=True)
class TopicConfigChoice:
    """What a restore creates its target topic with (see the module docstring)."""

    found: str  # where the stored configs are, or why there are none
    stored: Mapping[str, str] = field(default_factory=dict)
    applied: Mapping[str, str] = field(default_factory=dict)
    not_copied: Mapping[str, str] = field(default_factory=dict)  # name -> why
    set_after: Mapping[str, str] = field(default_factory=dict)  # name -> value
    set_after_why: Mapping[str, str] = field(default_factory=dict)  # name -> why
    overrides: Mapping[str, str] = field(default_factory=dict)
    use_stored: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "from": self.found,
            "use_stored": self.use_stored,
            "stored": dict(sorted(self.stored.items())),
            "applied": dict(sorted(self.applied.items())),
            "overrides": dict(sorted(self.overrides.items())),
            "not_copied": {k: self.not_copied[k] for k in sorted(self.not_copied)},
            "set_after_restore": dict(sorted(self.set_after.items())),
        }

    def after_command(self, bootstrap: str, topic: str) -> str | None:
        """The ``kafka-configs`` command that sets ``set_after`` once the restore is done."""
        if not self.set_after:
            return None
        pairs = ",".join(f"{k}={v}" for k, v in sorted(self.set_after.items()))
        return (
            f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics"
            f" --entity-name {topic} --add-config {pairs}"
        )


def choose_configs(
    stored: TopicConfigs | None,
    found: str,
    *,
    use_stored: bool = True,
    overrides: Mapping[str, str] | None = None,
) -> TopicConfigChoice:
    """The configs a new target is created with: ``stored``'s (unless ``use_stored`` is
    false) minus those left out, with ``overrides`` over them."""
    overrides = dict(overrides or {})
    kept = dict(stored.configs) if stored is not None and use_stored else {}
    applied: dict[str, str] = {}
    not_copied: dict[str, str] = {}
    after: dict[str, str] = {}
    why_after: dict[str, str] = {}
    for name, value in kept.items():
        if name in overrides:
            continue
        if name in NOT_COPIED:
            not_copied[name] = NOT_COPIED[name]
        elif name in SET_AFTER or (
            name == "message.timestamp.type" and value.lower() == "logappendtime"
        ):
            after[name] = value
            why_after[name] = SET_AFTER.get(name, _LOG_APPEND_TIME)
        else:
            applied[name] = value
    applied.update(overrides)
    return TopicConfigChoice(
        found=found,
        stored=dict(stored.configs) if stored is not None else {},
        applied=applied,
        not_copied=not_copied,
        set_after=after,
        set_after_why=why_after,
        overrides=overrides,
        use_stored=use_stored,
    )


async def target_configs(
    source_topic: str,
    topic_id: str,
    target_topic: str,
    partitions: int,
    cluster: TargetCluster,
    lookup: ConfigLookup | None,
    *,
    use_stored: bool = True,
    overrides: Mapping[str, str] | None = None,
) -> TopicConfigChoice:
    """The configs ``target_topic`` (absent) will be created with, checked against the
    target cluster before anything is written: TopicConfigError when the stored object
    cannot be read, when ``min.insync.replicas`` exceeds the replication factor the
    restore creates it with (no acks=all write, the restore's own included, would
    succeed), or when the cluster refuses them (its own validate-only check)."""
    if not use_stored:
        stored, found = None, "not read (--no-topic-configs)"
    elif lookup is None:
        stored, found = None, "not looked up"
    else:
        try:
            stored, found = await asyncio.to_thread(lookup, source_topic, topic_id)
        except TopicConfigsError as e:
            raise TopicConfigError(str(e)) from e
    choice = choose_configs(stored, found, use_stored=use_stored, overrides=overrides)
    applied = choice.applied
    if not applied:
        return choice
    replication = min(3, await cluster.broker_count())
    isr = applied.get("min.insync.replicas", "")
    if isr.isdigit() and int(isr) > replication:
        brokers = "brokers" if replication > 1 else "broker"
        origin = "--topic-config" if "min.insync.replicas" in choice.overrides else "the source's"
        raise TopicConfigError(
            f"target topic {target_topic!r} would be created with replication factor"
            f" {replication} (min(3, the cluster's {brokers})) and min.insync.replicas={isr}"
            f" ({origin}): no acks=all write, the restore's own included, would succeed; pass"
            f" --topic-config min.insync.replicas={replication}, or restore into a cluster of"
            f" {isr} or more brokers"
        )
    refused = await cluster.refusal(target_topic, partitions, applied)
    if refused is not None:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(applied.items()))
        raise TopicConfigError(
            f"the target cluster refuses to create topic {target_topic!r} with the configs"
            f" {shown} (from {found}): {refused}; override one with --topic-config"
            " NAME=VALUE, or pass --no-topic-configs"
        )
    return choice


__all__ = [
    "NOT_COPIED",
    "SET_AFTER",
    "ConfigLookup",
    "TopicConfigChoice",
    "choose_configs",
    "target_configs",
]
