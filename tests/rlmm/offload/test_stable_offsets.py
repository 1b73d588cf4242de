"""The last stable offset a round's copies are bounded by comes from the broker (issue 46).

One Apache Kafka 4.1.1 broker whose ``replica.high.watermark.checkpoint.interval.ms``
is ten minutes: after one restart (which checkpoints the high watermark at 10 for each
topic) the checkpoint never moves during these tests, as on a broker between two of
its checkpoint writes. Topics roll a segment at the first append a second after
the segment's first (``segment.ms``): each wave of records below starts a segment.

Invariants checked: a round copies the segments rolled since the checkpoint, bounded
by the LSO the broker answers (ListOffsets, READ_COMMITTED), where the checkpoint
alone holds them back; an open transaction holds the LSO back (the segment holding its
start is not copied until it commits, and is the round after); a broker that cannot
be asked leaves the round bounded by the checkpoint (no error), and the partition's
next round, its files unchanged but its LSO known again, is not skipped as idle.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from rlmm.archive import open_metadata_view
from rlmm.config import load_config
from rlmm.offload import RemoteLogManager
from rlmm.offload.cluster import ClusterClient
from rlmm.offload.cluster_leadership import ClusterLeadership
from rlmm.offload.dir_listings import SETTLED_S
from rlmm.offload.display import Display
from rlmm.offload.log_dirs import REPLICATION_OFFSET_CHECKPOINT, read_offset_checkpoint
from rlmm.offload.logdir import LogDirSource, scan_log_dirs
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload.settings import OffloadSettings
from rlmm.offload.sidecar import Sidecar
from rlmm.offload.skipped_topics import SkippedTopics
from tests.fixtures.apache_kafka import ApacheKafkaBroker, new_broker, start_or_fail
from tests.rlmm.offload.conftest import make_config
from tests.rlmm.offload.test_cluster_client import closed_port

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.timeout(120)]

ROLLED, TXN, FALLBACK = "lso-rolled", "lso-txn", "lso-fallback"
CHECKPOINTED = 10  # each topic's records before the restart: the checkpoint's HW
SEGMENT_MS = 1000  # well over a wave's time even on a loaded host
ROLL_S = SEGMENT_MS / 1000 + 0.2  # after a wave: the next append rolls a new segment


@pytest.fixture(scope="module")
def broker(apache_kafka_libs: Path) -> Iterator[ApacheKafkaBroker]:
    """A broker whose high watermark checkpoint says CHECKPOINTED for each topic and
    will not be written again while the tests run."""
    root = Path(tempfile.mkdtemp(prefix="rlmm-lso-"))
    kafka = new_broker(
        root,
        libs=apache_kafka_libs,
        overrides={"replica.high.watermark.checkpoint.interval.ms": "600000"},
    )
    start_or_fail(kafka)
    try:
        asyncio.run(_create_and_fill(kafka))
        # a clean stop checkpoints the high watermark; none is written after the start
        kafka.stop()
        start_or_fail(kafka)
        asyncio.run(led(kafka))
        yield kafka
    finally:
        kafka.stop()
        shutil.rmtree(root, ignore_errors=True)


async def led(kafka: ApacheKafkaBroker) -> None:
    """Wait until the broker leads every topic: a produce retried meanwhile keeps its
    batch's timestamp, and would roll a segment at the next append."""
    deadline = asyncio.get_running_loop().time() + 30
    tps = [(t, 0) for t in (ROLLED, TXN, FALLBACK)]
    while len(await stable_offsets(kafka, *tps)) < len(tps):
        assert asyncio.get_running_loop().time() < deadline, "the broker leads no topic"
        await asyncio.sleep(0.1)


async def _create_and_fill(kafka: ApacheKafkaBroker) -> None:
    bootstrap = kafka.bootstrap
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        topics = [NewTopic(t, 1, 1, topic_configs={"segment.ms": str(SEGMENT_MS)}) for t in
                  (ROLLED, TXN, FALLBACK)]  # fmt: skip
        await admin.create_topics(topics)
    finally:
        await admin.close()
    await led(kafka)
    async with AIOKafkaProducer(bootstrap_servers=bootstrap) as producer:
        for topic in (ROLLED, TXN, FALLBACK):
            await wave(producer, topic)


async def wave(producer: AIOKafkaProducer, topic: str, n: int = 10) -> None:
    """``n`` records, one batch each, then long enough for the next append to roll."""
    for i in range(n):
        await producer.send_and_wait(topic, f"{topic}-{i}".encode())
    await asyncio.sleep(ROLL_S)


def checkpointed(broker: ApacheKafkaBroker, topic: str) -> int | None:
    """The high watermark the broker's checkpoint file holds for ``topic``-0."""
    return read_offset_checkpoint(broker.data_dir / REPLICATION_OFFSET_CHECKPOINT).get((topic, 0))


def segment_bases(broker: ApacheKafkaBroker, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def eligible(bases: list[int], stable: int) -> list[int]:
    """The rolled segments whose next segment starts at or below ``stable``."""
    return [base for base, after in pairwise(bases) if after <= stable]


def sidecar_config(tmp: Path, broker: ApacheKafkaBroker) -> Path:
    path = tmp / "offload.toml"
    path.write_text(
        f'data_dir = "{tmp / "data"}"\n[eventlog]\npartitions = 4\n'
        f'[offload]\n"retention.ms" = -1\n"bootstrap.servers" = "{broker.bootstrap}"\n'
    )
    return path


async def copied_starts(config: Path, topic: str) -> list[int]:
    """The start offsets of ``topic``-0's segments in the store, in order."""

    def read() -> list[int]:
        with open_metadata_view(load_config(config, env={})) as view:
            tp = view.find(topic, 0)
            return [] if tp is None else sorted(m.start_offset for m in view.segments(tp))

    return await asyncio.to_thread(read)


async def run_once(config: Path, broker: ApacheKafkaBroker) -> None:
    sidecar = Sidecar(load_config(config, env={}), [broker.data_dir], once=True,
                      display=Display(rich=False))  # fmt: skip
    report = await asyncio.wait_for(sidecar.run(), 60)
    assert report.leadership_unknown is None


async def stable_offsets(
    broker: ApacheKafkaBroker, *tps: tuple[str, int]
) -> dict[tuple[str, int], int]:
    client = ClusterClient({"bootstrap_servers": broker.bootstrap}, broker.node_id, timeout_s=10)
    try:
        return await client.stable_offsets(set(tps))
    finally:
        await client.close()


async def test_a_round_copies_what_the_broker_s_lso_allows_past_the_checkpoint(
    broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    async with AIOKafkaProducer(bootstrap_servers=broker.bootstrap) as producer:
        for _ in range(3):
            await wave(producer, ROLLED)
    bases = segment_bases(broker, ROLLED)
    # a partition the broker does not hold is left out, not an error
    found = await stable_offsets(broker, (ROLLED, 0), ("no-such-topic", 0))
    assert found == {(ROLLED, 0): CHECKPOINTED + 30}
    # the checkpoint alone holds back the segments after the first
    assert checkpointed(broker, ROLLED) == CHECKPOINTED
    assert eligible(bases, CHECKPOINTED) == [0] and len(bases) >= 4, bases

    config = sidecar_config(tmp_path, broker)
    await run_once(config, broker)
    assert await copied_starts(config, ROLLED) == bases[:-1]
    assert checkpointed(broker, ROLLED) == CHECKPOINTED  # still: the broker's LSO did it


async def test_an_open_transaction_holds_the_copy_back_until_it_commits(
    broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    config = sidecar_config(tmp_path, broker)
    async with (
        AIOKafkaProducer(bootstrap_servers=broker.bootstrap) as plain,
        AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, transactional_id=f"rlmm-lso-{tmp_path.name}"
        ) as txn,  # fmt: skip
    ):
        await wave(plain, TXN)
        await txn.begin_transaction()
        first = CHECKPOINTED + 10  # the transaction's first offset
        await wave(txn, TXN)
        await wave(plain, TXN)
        await wave(plain, TXN)
        bases = segment_bases(broker, TXN)
        assert first in bases and bases[-1] > first + 10, bases
        assert await stable_offsets(broker, (TXN, 0)) == {(TXN, 0): first}
        await run_once(config, broker)
        held = await copied_starts(config, TXN)
        assert held == eligible(bases, first) and held[-1] < first

        await txn.commit_transaction()
    # The newest producer snapshot (of the last roll, before the marker) still has the
    # transaction open: bounded by it, the segment holding its start would wait for
    # another roll; the broker's LSO has the commit (once the coordinator wrote its
    # marker, after the commit returned).
    deadline = asyncio.get_running_loop().time() + 10
    while (await stable_offsets(broker, (TXN, 0))).get((TXN, 0), 0) <= first + 30:
        assert asyncio.get_running_loop().time() < deadline, "the commit marker never came"
        await asyncio.sleep(0.1)
    await run_once(config, broker)
    # every rolled segment (the marker may have rolled one more, if it came late)
    bases = segment_bases(broker, TXN)
    assert await copied_starts(config, TXN) == bases[:-1]
    assert first in bases[:-1]
    assert checkpointed(broker, TXN) == CHECKPOINTED


def fallback_source(broker: ApacheKafkaBroker, tmp: Path) -> LogDirSource:
    settings = OffloadSettings.from_config(make_config(tmp))
    sources = scan_log_dirs([broker.data_dir], settings)
    return next(s for s in sources if s.pdir.topic == FALLBACK)


async def test_an_unreachable_broker_leaves_the_checkpoint_s_bound(
    broker: ApacheKafkaBroker,
    tmp_path: Path,
    make_rlm: Callable[..., RemoteLogManager],
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with AIOKafkaProducer(bootstrap_servers=broker.bootstrap) as producer:
        for _ in range(3):
            await wave(producer, FALLBACK)
    bases = segment_bases(broker, FALLBACK)
    assert eligible(bases, CHECKPOINTED) == [0] and len(bases) >= 4, bases
    source = fallback_source(broker, tmp_path / "settings")
    tp = source.topic_id_partition
    config = make_config(tmp_path / "leading")
    metrics = OffloadMetrics()
    leading = ClusterLeadership(config, metrics, SkippedTopics(metrics))
    leading.cluster = ClusterClient(
        {"bootstrap_servers": f"127.0.0.1:{closed_port()}"}, broker.node_id, timeout_s=3
    )
    rlm = make_rlm()
    await rlm.on_leadership_changes([source], start_tasks=False)
    try:
        source.set_stable_offset(CHECKPOINTED + 30)  # an earlier round's is not kept
        caplog.set_level(logging.DEBUG, logger="rlmm.offload")
        await leading.stable_offsets([tp], {tp: source})
        assert source.last_stable_offset() == CHECKPOINTED == checkpointed(broker, FALLBACK)
        assert "last stable offsets unknown this round" in caplog.text
        for _ in range(2):  # the second does nothing: idle, with these inputs
            results = await rlm.run_round([tp])
            assert results[tp][0].round_failure is None
        assert rlm.highest_remote_offset(tp) == CHECKPOINTED - 1
        # the files settle; their token stays, the broker's LSO is the only change
        await asyncio.sleep(SETTLED_S + 0.2)
        await rlm.run_round([tp])
        assert rlm.highest_remote_offset(tp) == CHECKPOINTED - 1

        await leading.cluster.close()
        leading.cluster = ClusterClient(
            {"bootstrap_servers": broker.bootstrap}, broker.node_id, timeout_s=10
        )
        await leading.stable_offsets([tp], {tp: source})
        assert source.last_stable_offset() == CHECKPOINTED + 30
        await rlm.run_round([tp])
        assert rlm.highest_remote_offset(tp) == bases[-1] - 1
    finally:
        await leading.cluster.close()
    # (aiokafka says at ERROR that it cannot connect: its line, not the sidecar's)
    assert not [
        r for r in caplog.records if r.name.startswith("rlmm") and r.levelno >= logging.WARNING
    ]
