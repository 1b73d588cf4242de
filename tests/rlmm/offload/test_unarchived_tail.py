"""The unarchived tail: what of a led partition's local log remote storage lacks.

Invariants checked (issue 46, item 1): after a round, ``rlmm_unarchived_offsets`` is
the log end minus the archive's end and ``rlmm_unarchived_bytes`` the bytes of the
local segments after it, the active segment included, while the copy lag (Kafka's
RemoteCopyLag, which leaves the active segment out) is 0;
``rlmm_archive_newest_record_age_seconds`` is now minus the newest archived segment's
max timestamp, and grows between rounds; a partition with nothing archived has no age;
a partition no longer led has none of the three series. The real-broker version is
tests/integration/test_offload_unarchived_tail.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import generate_latest

from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import TopicIdPartition
from rlmm.offload import RemoteLogManager, RetentionSettings
from rlmm.offload.metrics import OffloadMetrics
from tests.rlmm.offload.conftest import source, write_partition

NAMES = (
    "rlmm_unarchived_offsets",
    "rlmm_unarchived_bytes",
    "rlmm_archive_newest_record_age_seconds",
)


def samples(body: str, name: str) -> dict[tuple[str, str], float]:
    """(topic, partition) -> value of every sample of ``name`` in an exposition."""
    line = re.compile(rf'^{name}\{{partition="([^"]*)",topic="([^"]*)"\}} (\S+)$', re.M)
    return {(t, p): float(v) for p, t, v in line.findall(body)}


def scraped(metrics: OffloadMetrics, name: str) -> dict[tuple[str, str], float]:
    """What ``/metrics`` shows of ``name`` (the pre-rendered path), checked equal to what
    the registry's own collect gives an embedder's exporter (the ages to the second)."""
    served = samples(metrics.scrape(generate_latest).decode(), name)
    collected = samples(generate_latest(metrics.registry).decode(), name)
    assert served.keys() == collected.keys()
    for key, value in served.items():
        assert abs(value - collected[key]) < 1.0, (name, key, value, collected[key])
    return served


async def test_the_active_segment_is_counted_and_the_age_grows(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(tmp_path / "logs", "orders", 0)
    src = source(pdir)
    tp = src.topic_id_partition
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    copied, _expired = (await rlm.run_round())[tp]
    *rolled, active = pdir.segments()
    assert len(copied.copied) == len(rolled) >= 2
    newest = copied.copied[-1]
    assert newest.end_offset + 1 == active.base_offset
    log_end = src.log_end_offset()
    assert log_end > active.base_offset  # the active segment holds records

    key = ("orders", "0")
    metrics = rlm.metrics
    assert scraped(metrics, "rlmm_unarchived_offsets") == {key: log_end - active.base_offset}
    assert scraped(metrics, "rlmm_unarchived_bytes") == {key: active.size_in_bytes}
    # Kafka's copy lag leaves the active segment out: it says 0 here
    assert scraped(metrics, "rlmm_remote_copy_lag_bytes") == {key: 0}
    expected_age = time.time() - newest.max_timestamp_ms / 1000
    age = scraped(metrics, "rlmm_archive_newest_record_age_seconds")[key]
    assert abs(age - expected_age) < 2.0, (age, expected_age)
    # No round runs, time passes: the age grows all the same.
    time.sleep(1.1)
    later = scraped(metrics, "rlmm_archive_newest_record_age_seconds")[key]
    assert later >= age + 1.0, (age, later)


async def test_nothing_archived_counts_the_whole_log_and_has_no_age(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(tmp_path / "logs", "audit", 0)
    src = source(pdir, RetentionSettings(retention_ms=-1, retention_bytes=-1,
                                         remote_log_copy_disable=True))  # fmt: skip
    tp = src.topic_id_partition
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    copied, _expired = (await rlm.run_round())[tp]
    assert copied.copied == []
    key = ("audit", "0")
    assert scraped(rlm.metrics, "rlmm_unarchived_offsets") == {key: src.log_end_offset()}
    local = sum(s.size_in_bytes for s in pdir.segments())
    assert scraped(rlm.metrics, "rlmm_unarchived_bytes") == {key: local}
    assert scraped(rlm.metrics, "rlmm_archive_newest_record_age_seconds") == {}


async def test_a_partition_no_longer_led_has_no_tail_series(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    a = source(write_partition(tmp_path / "logs", "orders", 0))
    b = source(write_partition(tmp_path / "logs", "orders", 1))
    rlm = make_rlm()
    await rlm.on_leadership_changes([a, b], start_tasks=False)
    await rlm.run_round()
    for name in NAMES:
        assert set(scraped(rlm.metrics, name)) == {("orders", "0"), ("orders", "1")}, name
    await rlm.abandon([a.topic_id_partition])
    for name in NAMES:
        assert set(scraped(rlm.metrics, name)) == {("orders", "1")}, name
    await rlm.stop_partitions([b.topic_id_partition])
    for name in NAMES:
        assert scraped(rlm.metrics, name) == {}, name


def test_an_age_is_set_by_its_timestamp_only() -> None:
    import uuid

    import pytest

    metrics = OffloadMetrics()
    tp = TopicIdPartition(uuid.uuid4(), 'we"ird\\topic', 3)
    with pytest.raises(TypeError, match="set_since"):
        metrics.archive_newest_record_age.set_partition(tp, 1.0)
    metrics.set_unarchived(tp, 5, 100, int(time.time() * 1000) - 60_000)
    body = metrics.scrape(generate_latest).decode()
    (line,) = [ln for ln in body.splitlines() if ln.startswith("rlmm_archive_newest")]
    assert line.startswith(
        'rlmm_archive_newest_record_age_seconds{partition="3",topic="we\\"ird\\\\topic"} '
    )
    assert 59.0 <= float(line.rsplit(" ", 1)[1]) < 62.0
    metrics.set_unarchived(tp, 5, 100, None)  # the archive emptied: no age
    assert "rlmm_archive_newest_record_age_seconds{" not in metrics.scrape(generate_latest).decode()
