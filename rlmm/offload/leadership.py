"""Leadership: which of the partitions found in a broker's log dirs this sidecar copies.

Job: read the broker's node id from its log dirs (``meta.properties``), and split the
partitions found into those to lead, those to follow and those to wait for, from one
answer of the cluster (``ClusterView``), as Kafka's RemoteLogManager only copies and
expires the partitions its broker leads.

Invariants: a partition is led only when the cluster names this node its leader and
the log dir's leader-epoch checkpoint has reached the cluster's leader epoch (else the
sidecar's view is stale and it waits); a topic the cluster tiers itself is never led;
nothing here falls back to "lead everything" (without a cluster that is the caller's
explicit standalone mode, ``lead_all``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rlmm.model import TopicIdPartition
from rlmm.offload.cluster import ClusterView
from rlmm.offload.errors import LeadershipError, LogDirError
from rlmm.offload.log_source import LogSource

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"


def read_node_id(log_dirs: Sequence[Path]) -> int | None:
    """The broker's ``node.id`` from its log dirs' ``meta.properties`` (Kafka writes one
    in each when it formats them); None when none has one. Dirs that disagree, or an
    unreadable file, are a LogDirError naming them."""
    found: dict[int, Path] = {}
    for log_dir in log_dirs:
        path = log_dir / META_PROPERTIES
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise LogDirError(f"{path}: cannot read: {e}") from e
        props = {}
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                props[key.strip()] = value.strip()
        raw = props.get("node.id", props.get("broker.id"))
        if raw is None:
            continue
        try:
            found[int(raw)] = path
        except ValueError as e:
            raise LogDirError(f"{path}: node.id {raw!r} is not a number") from e
    if len(found) > 1:
        named = ", ".join(f"{p} says {n}" for n, p in sorted(found.items()))
        raise LogDirError(f"the log dirs belong to different brokers: {named}")
    return next(iter(found), None)


def check_node_id(node_id: int | None, configured: int | None) -> int:
    """The sidecar's broker id: the log dirs' node id, else the configured broker_id, else 0.
    A configured broker_id other than the log dirs' node id is refused (one line)."""
    if node_id is not None and configured is not None and configured != node_id:
        raise LeadershipError(
            f"broker_id = {configured} is configured, but the log dirs belong to node"
            f" {node_id} (meta.properties): remove broker_id or set it to {node_id}"
        )
    if node_id is not None:
        return node_id
    return configured if configured is not None else 0


@dataclass
class Assignment:
    """One round's split of the partitions found (see ``assign``)."""

    lead: list[LogSource] = field(default_factory=list)
    follow: list[TopicIdPartition] = field(default_factory=list)
    waiting: dict[TopicIdPartition, str] = field(default_factory=dict)  # led, view stale
    kafka_tiered: set[str] = field(default_factory=set)  # topics the cluster tiers itself
    replicated: list[TopicIdPartition] = field(default_factory=list)  # replicas > 1
    epochs: dict[TopicIdPartition, int] = field(default_factory=dict)  # cluster's epoch, led


def lead_all(sources: Iterable[LogSource]) -> Assignment:
    """No cluster configured (one broker, or log dirs without a broker): lead all."""
    return Assignment(lead=list(sources))


def assign(sources: Iterable[LogSource], view: ClusterView, node_id: int) -> Assignment:
    """Split ``sources`` by the cluster's ``view`` for broker ``node_id``."""
    out = Assignment()
    for source in sources:
        tp = source.topic_id_partition
        if tp.topic in view.kafka_tiered:
            out.kafka_tiered.add(tp.topic)
            continue
        state = view.partitions.get((tp.topic, tp.partition))
        if state is None:
            out.follow.append(tp)  # not in the cluster (deleted, or another cluster's dir)
            continue
        if len(state.replicas) > 1:
            out.replicated.append(tp)
        if state.leader != node_id:
            out.follow.append(tp)
            continue
        local = source.current_leader_epoch()
        if local < state.leader_epoch:
            out.waiting[tp] = (
                f"the cluster says leader epoch {state.leader_epoch}, the log dir's"
                f" leader-epoch-checkpoint has reached {local}"
            )
            continue
        out.lead.append(source)
        out.epochs[tp] = state.leader_epoch
    return out


def lost(
    led: dict[TopicIdPartition, int], view: ClusterView, node_id: int
) -> list[TopicIdPartition]:
    """Partitions led at epoch ``led[tp]`` that the cluster now gives to another broker,
    or to this one at a newer epoch (it lost and regained leadership meanwhile)."""
    out = []
    for tp, epoch in led.items():
        state = view.partitions.get((tp.topic, tp.partition))
        if (
            state is None
            or state.leader != node_id
            or state.leader_epoch != epoch
            or tp.topic in view.kafka_tiered
        ):
            out.append(tp)
    return out


__all__ = ["Assignment", "assign", "check_node_id", "lead_all", "lost", "read_node_id"]
