"""The copy quota (KIP-956): Kafka's rate arithmetic, and a real copy held to the bound.

Invariants checked: the rate and the throttle time are Kafka's (``Rate`` over sampled
windows, ``QuotaUtils.throttleTime``); waiters are served first come first served; a
real RemoteLogManager copying 4 partitions of real segments at once keeps its byte rate
within 10% of the bound over the run, every partition progressing all along; the
throttle time shows under Kafka's metric names; a bad setting is refused naming it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from rlmm.errors import ConfigError
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.offload import RemoteLogManager
from rlmm.offload.quota import UNLIMITED, CopyQuota
from rlmm.offload.settings import OffloadSettings
from tests.rlmm.offload.conftest import make_config, source, write_partition


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_counts_a_young_history_as_window_num_minus_one_windows() -> None:
    clock = Clock()
    quota = CopyQuota(100, window_num=11, window_size_s=1, clock=clock)
    quota.record(500)
    assert quota.rate() == pytest.approx(50.0)  # 500 bytes over 10 windows
    assert quota.throttle_time_s() == 0
    quota.record(1_500)
    # 2,000 bytes over 10 s is 200 B/s, twice the bound: wait (200-100)/100 x 10 s
    assert quota.throttle_time_s() == pytest.approx(10.0)
    clock.now += 10
    assert quota.rate() == pytest.approx(2_000 / 10)  # 10 s old: the floor of 10 windows
    clock.now += 2  # its window is now older than 11 x 1 s: purged
    assert quota.rate() == 0
    assert quota.throttle_time_s() == 0


def test_samples_roll_per_window_and_expire() -> None:
    clock = Clock()
    quota = CopyQuota(1_000, window_num=3, window_size_s=2, clock=clock)
    for _ in range(5):
        quota.record(1_000)
        clock.now += 2
    # only the last 3 windows count, over the floor of 2 windows plus the young one
    assert quota.rate() == pytest.approx(3_000 / 6)


async def test_waiters_are_served_in_arrival_order() -> None:
    quota = CopyQuota(50_000, window_num=2, window_size_s=0.1)
    order: list[int] = []

    async def copy(i: int) -> None:
        await quota.reserve(10_000)
        order.append(i)

    await quota.reserve(20_000)  # over the bound: everyone after this waits
    await asyncio.gather(*(copy(i) for i in range(6)))
    assert order == list(range(6))


async def test_unlimited_never_waits() -> None:
    quota = CopyQuota()
    assert not quota.limited and quota.bound == UNLIMITED
    for _ in range(1000):
        assert await quota.reserve(1 << 30) == 0


def test_bad_quota_settings_are_refused_naming_the_key(tmp_path: Path) -> None:
    key = "offload.remote.log.manager.copy.max.bytes.per.second"
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make_config(tmp_path, **{key: 0})
    key = "offload.remote.log.manager.copy.quota.window.num"
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make_config(tmp_path, **{key: -1})
    settings = OffloadSettings.from_config(make_config(
        tmp_path, **{"offload.remote.log.manager.copy.max.bytes.per.second": 1234,
                     "offload.remote.log.manager.copy.quota.window.size.seconds": 2},
    ))  # fmt: skip
    quota = settings.copy_quota()
    assert (quota.bound, quota.window_num, quota.window_size_s) == (1234, 11, 2)


@pytest.mark.timeout(120)
async def test_a_real_copy_holds_the_rate_and_starves_no_partition(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    parts = [
        write_partition(tmp_path / "logs", "quota", p, records=3000, value_size=300,
                        segment_bytes=64 * 1024, epochs=(0,), aborted_txn=False)
        for p in range(4)
    ]  # fmt: skip
    bound = 512 * 1024
    quota = CopyQuota(bound, window_num=2, window_size_s=1)
    rlm = make_rlm(copier_concurrency=4, copy_quota=quota)
    copies: list[tuple[float, int, int]] = []  # (finished at, partition, bytes)
    rlm.set_listener(
        lambda e: copies.append((time.monotonic(), e.segment.topic_id_partition.partition,
                                 e.size_in_bytes))
        if e.kind == "copied" and e.segment is not None else None
    )  # fmt: skip
    sources = [source(p) for p in parts]
    await rlm.on_leadership_changes(sources, start_tasks=False)
    started = time.monotonic()
    results = await rlm.run_round()
    elapsed = time.monotonic() - started
    total = sum(r.bytes for r, _ in results.values())
    assert all(r.error is None for r, _ in results.values())
    assert total >= 7 * bound  # long enough for the bound to matter
    # The first (window.num - 1) windows' worth goes at once, as in Kafka; after that
    # the rate is the bound.
    burst = (quota.window_num - 1) * quota.window_size_s * bound
    rate = (total - burst) / elapsed
    assert bound * 0.9 <= rate <= bound * 1.1, (rate, bound, elapsed)
    # no starvation: every partition copies in each third of the run
    copies.sort()
    first, last = copies[0][0], copies[-1][0]
    for third in range(3):
        lo = first + third * (last - first) / 3
        hi = first + (third + 1) * (last - first) / 3
        seen = {p for at, p, _ in copies if lo <= at <= hi}
        assert seen == {0, 1, 2, 3}, (third, seen)
    text = generate_latest(rlm.metrics.registry).decode()
    assert "rlmm_remote_copy_throttle_time_seconds_count" in text
    waited = rlm.metrics.copy_throttle_time._count.get()
    assert waited > 0
    assert rlm.metrics._throttle_max() > 0
