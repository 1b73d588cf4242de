"""The three-node Apache Kafka cluster fixture, and the replication behaviour that the
offload sidecar's cluster tests build on.

Invariants checked: a node that cannot start fails the cluster's start with every
node's log tail and leaves no JVM, and the cluster starts once the cause is gone;
with ``kafka_tiering`` every node runs Kafka's own RLM (``__remote_log_metadata``
replicated 3 times, segments copied to the shared LocalTieredStorage dir). A
SIGKILLed leader's partition gets a new leader with a higher epoch and keeps taking
acks=all writes; the restarted node rejoins the full ISR and a preferred election
hands its partition back, nothing produced lost. A controlled shutdown moves
leadership before the node is gone (no waiting for it to be fenced). An unclean
election makes an out-of-sync replica the leader, and the records only the old leader
had are lost for good: no consumer sees them, and the old leader drops them when it
rejoins. In KRaft the controller runs that election by itself on a topic with
``unclean.leader.election.enable=true``; on a topic with it false the partition stays
without a leader until LeaderElectionCommand's UNCLEAN election is asked for.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.fixtures.apache_kafka import METADATA_PARTITIONS, METADATA_TOPIC
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster, Record, new_cluster
from tests.fixtures.kafka import BrokerStartError

pytestmark = [pytest.mark.apache_kafka, pytest.mark.slow, pytest.mark.timeout(240)]


def records(
    sent: Sequence[tuple[int, int]], values: Sequence[bytes], partitions: int
) -> dict[int, list[Record]]:
    """What consume_all should return after ``values`` were produced at ``sent``."""
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    for (partition, offset), value in zip(sent, values, strict=True):
        out[partition].append((offset, None, value))
    return {p: sorted(rs) for p, rs in out.items()}


def test_failed_start_reports_every_log_then_kafka_tiering_runs_on_every_node(
    tmp_path: Path,
) -> None:
    # First in the file, before the session cluster starts: three JVMs at a time.
    cluster = new_cluster(tmp_path / "cluster", kafka_tiering=True)
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", cluster.node(2).controller_port))
            taken.listen()
            with pytest.raises(BrokerStartError) as info:
                cluster.start(timeout=60)
        message = str(info.value)
        assert "Address already in use" in message
        assert all(f"--- node {i} " in message for i in cluster.ids)
        assert cluster.live_ids() == []  # the others were killed with it

        cluster.start()  # the port is free again: the same nodes and log dirs come up
        for p in range(METADATA_PARTITIONS):  # Kafka's RLMM creates it once it runs
            assert len(cluster.wait_isr(METADATA_TOPIC, p, 3).replicas) == 3
        topic = "tiered"
        tiered = {"remote.storage.enable": "true", "segment.bytes": str(1 << 20),
                  "local.retention.ms": "1000"}  # fmt: skip
        cluster.create_topic(topic, 1, configs=tiered)
        values = [bytes([i % 256]) * 10_000 for i in range(130)]  # 1.3 MB: a rolled segment
        sent = cluster.produce(topic, values)
        deadline = time.monotonic() + 60
        while not (copied := list(cluster.remote_dir.rglob(f"{topic}-0-*/*.log"))):
            assert time.monotonic() < deadline, "Kafka tiered no segment within 60 s"
            time.sleep(0.5)
        assert copied[0].name.startswith(f"{0:020d}-")
        assert cluster.consume_all(topic) == records(sent, values, 1)
    finally:
        cluster.close()


def test_cluster_layout(kafka_cluster: ApacheKafkaCluster) -> None:
    cluster = kafka_cluster
    assert cluster.ids == [1, 2, 3] and cluster.live_ids() == [1, 2, 3]
    assert len(cluster.bootstrap.split(",")) == 3
    for i in cluster.ids:
        meta = (cluster.log_dir(i) / "meta.properties").read_text()
        assert f"node.id={i}\n" in meta and f"cluster.id={cluster.cluster_id}\n" in meta
        assert cluster.log_dir(i) == cluster.root / f"node-{i}" / "data"
    started = time.monotonic()
    cluster.start()  # every node runs: nothing to do
    assert time.monotonic() - started < 5


def test_sigkilled_leader_fails_over_and_gets_its_partition_back(
    kafka_cluster: ApacheKafkaCluster,
) -> None:
    cluster, topic = kafka_cluster, "failover"
    created = cluster.create_topic(topic, 3)
    first = created[0]
    assert first.leader == first.replicas[0] and len(first.isr) == 3
    values = [f"before-{i}".encode() for i in range(30)]
    sent = cluster.produce(topic, values)
    assert {p for p, _ in sent} == {0, 1, 2}

    old = first.leader
    cluster.kill(old)
    moved = cluster.wait_for_leader(topic, 0, not_in={old}, timeout=30)
    assert moved.leader_epoch > first.leader_epoch
    assert old not in moved.isr
    more = [f"after-{i}".encode() for i in range(30)]
    sent += cluster.produce(topic, more)  # acks=all: an ISR of 2 is min.insync.replicas

    cluster.start_node(old)
    for p in range(3):
        cluster.wait_isr(topic, p, 3)
    cluster.elect_preferred(topic)
    back = cluster.wait_for_leader(topic, 0, expect=old, timeout=30)
    assert back.leader_epoch > moved.leader_epoch
    assert cluster.consume_all(topic) == records(sent, values + more, 3)


def test_controlled_shutdown_moves_leadership_before_the_node_is_gone(
    kafka_cluster: ApacheKafkaCluster,
) -> None:
    cluster, topic = kafka_cluster, "shutdown"
    created = cluster.create_topic(topic, 3)
    values = [f"before-{i}".encode() for i in range(15)]
    sent = cluster.produce(topic, values)
    old = created[0].leader
    led = [p for p, state in created.items() if state.leader == old]

    cluster.stop(old)
    for p in led:
        # A SIGKILLed node keeps its leaderships until it is fenced, 6 s after its last
        # heartbeat; a controlled shutdown hands them over before the JVM exits.
        state = cluster.wait_for_leader(topic, p, not_in={old}, timeout=3)
        assert state.leader_epoch > created[p].leader_epoch and old not in state.isr
    more = [f"after-{i}".encode() for i in range(15)]
    sent += cluster.produce(topic, more)
    assert cluster.consume_all(topic) == records(sent, values + more, 3)


def test_unclean_election_elects_an_out_of_sync_replica_without_the_records_it_missed(
    kafka_cluster: ApacheKafkaCluster,
) -> None:
    # Replicas on nodes 1 and 2 only: node 3 keeps the controller quorum (two of three
    # voters) while 1 is dead and 2 stalled, so at most one node is ever down.
    cluster, leader, stale = kafka_cluster, 1, 2
    auto, manual = "unclean-auto", "unclean-manual"
    topics = (auto, manual)
    for topic, unclean in ((auto, "true"), (manual, "false")):
        cluster.create_topic(
            topic,
            configs={"unclean.leader.election.enable": unclean, "min.insync.replicas": "1"},
            assignments={0: [leader, stale]},
        )
    acked_values = [f"acked-{i}".encode() for i in range(10)]
    acked = {t: cluster.produce(t, acked_values) for t in topics}  # on both replicas

    # The follower stalls (SIGSTOP): no fetches, no heartbeats; it leaves the ISR.
    cluster.pause(stale)
    alone = {t: cluster.wait_isr(t, 0, 1, timeout=30) for t in topics}
    assert all(state.isr == (leader,) for state in alone.values())
    lost_values = [f"lost-{i}".encode() for i in range(10)]
    for t in topics:  # acks=all, and the ISR is the leader alone: only it has them
        assert cluster.produce(t, lost_values) == [(0, o) for o in range(10, 20)]

    # The leader dies; the stale follower comes back before it could fetch anything.
    cluster.kill(leader)
    cluster.resume(stale)
    elected = cluster.wait_for_leader(auto, 0, expect=stale, timeout=30)
    assert elected.isr == (stale,) and elected.leader_epoch > alone[auto].leader_epoch
    # By now the old leader is fenced and the stale replica unfenced, yet the topic
    # with unclean elections off has no leader: its only ISR member is dead.
    offline = cluster.wait_partition(manual, 0, lambda s: s.leader == -1, "no leader")
    assert stale not in offline.isr
    cluster.elect_unclean(manual, 0)
    forced = cluster.wait_for_leader(manual, 0, expect=stale, timeout=30)
    assert forced.isr == (stale,) and forced.leader_epoch > alone[manual].leader_epoch

    for t in topics:
        assert cluster.consume_all(t) == records(acked[t], acked_values, 1)
    after_values = [f"after-{i}".encode() for i in range(5)]
    after = {t: cluster.produce(t, after_values) for t in topics}
    # The new leader hands out again the offsets the lost records had on the old one.
    assert all(sent == [(0, o) for o in range(10, 15)] for sent in after.values())

    # The old leader rejoins: it truncates its log to the new leader's, drops the lost
    # records, catches up, and once it leads again it serves the same records.
    cluster.start_node(leader)
    for t in topics:
        cluster.wait_isr(t, 0, 2)
    cluster.elect_preferred()
    for t in topics:
        cluster.wait_for_leader(t, 0, expect=leader, timeout=30)
        assert cluster.consume_all(t) == records(
            acked[t] + after[t], acked_values + after_values, 1
        )
