"""KIP-1241's delayed upload: ``remote.copy.lag.ms`` and ``remote.copy.lag.bytes``.

Invariants checked: the rule as Kafka's ``candidateLogSegments`` applies it (-1 is the
local retention, 0 copies at once whatever the other says, either check that is on
lets a segment go, both off copy nothing, an unreadable or future timestamp passes);
a copy round on a real partition dir copies up to the first segment held back and
never past it, holds back by age (the largest record timestamp) and by the bytes after
a segment, leaves held segments out of the copy lag, and copies them once old enough;
an idle partition's round comes back when the delay lets a segment go; the settings
come from ``[offload]``, ``[offload.topics.<t>]`` and the cluster, and -2 is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from rlmm.config import load_config
from rlmm.errors import ConfigError
from rlmm.offload import OffloadSettings, RemoteLogManager, RetentionSettings
from rlmm.offload.copy_delay import CopyDelay, HeldBack, hold_back, never_copied_problem
from rlmm.offload.log_source import LocalSegment
from tests.rlmm.offload.conftest import make_config, source
from tests.rlmm.offload.test_scale import CountingSource, partition, settle

BASE = 1_700_000_000_000  # generated record timestamps are BASE + offset
MINUTE = 60_000


def delay(ms: int, nbytes: int, **kw: int) -> CopyDelay:
    settings = RetentionSettings(remote_copy_lag_ms=ms, remote_copy_lag_bytes=nbytes, **kw)
    return CopyDelay.of(settings)


def test_minus_one_follows_the_local_retention_and_minus_two_there_retention() -> None:
    assert delay(-1, -1, local_retention_ms=5000, local_retention_bytes=7000) == CopyDelay(
        5000, 7000
    )
    # local.retention.* at -2 follow retention.*
    assert delay(-1, -1, retention_ms=9000, retention_bytes=-1) == CopyDelay(9000, -1)
    assert delay(300, 400) == CopyDelay(300, 400)
    assert RetentionSettings().remote_copy_lag_ms == 0  # Kafka's defaults: at once
    assert CopyDelay.of(RetentionSettings()).immediate


def test_the_rule_either_check_lets_a_segment_go() -> None:
    now = BASE + 10 * MINUTE
    young, old = now - MINUTE, now - 5 * MINUTE
    # 0 on either side: at once, whatever the other says
    assert delay(0, 10**9).passes(young, 0, now)
    assert delay(10 * MINUTE, 0).passes(young, 0, now)
    # time alone (bytes off: -1 with unlimited local retention)
    by_time = delay(2 * MINUTE, -1, retention_bytes=-1)
    assert not by_time.passes(young, 10**12, now)
    assert by_time.passes(old, 0, now)
    assert by_time.passes(now - 2 * MINUTE, 0, now)  # exactly old enough
    assert by_time.passes(now + MINUTE, 0, now)  # a timestamp from the future: Kafka's
    assert by_time.passes(None, 0, now)  # unreadable: the copy reads it and says why
    assert by_time.due_ms(young) == young + 2 * MINUTE
    # size alone (time off: -1 with unlimited local retention)
    by_size = delay(-1, 1000, retention_ms=-1)
    assert not by_size.passes(old, 999, now)
    assert by_size.passes(young, 1000, now)
    assert by_size.due_ms(young) is None  # only the log growing lets it go
    # both on: either
    both = delay(2 * MINUTE, 1000)
    assert both.passes(old, 0, now) and both.passes(young, 5000, now)
    assert not both.passes(young, 999, now)
    # both off: held for good
    never = delay(-1, -1, retention_ms=-1, retention_bytes=-1)
    assert not never.immediate and not never.passes(0, 10**12, now)


def test_hold_back_stops_at_the_first_segment_held_and_reads_only_what_it_needs() -> None:
    segments = [LocalSegment(i * 10, (i + 1) * 10, 100, f"s{i}") for i in range(5)]
    now = BASE
    stamps = {0: now - 10 * MINUTE, 10: now - 9 * MINUTE, 20: now, 30: now - 20 * MINUTE,
              40: now}  # fmt: skip
    asked: list[int] = []

    def largest(segment: LocalSegment) -> int | None:
        asked.append(segment.base_offset)
        return stamps[segment.base_offset]

    # 500 bytes in the five, 50 in the active segment; by size, s0..s1 have >= 300 after
    held = hold_back(segments, 550, delay(5 * MINUTE, 300), largest, now)
    assert held == HeldBack(copyable=2, held=3, due_ms=now + 5 * MINUTE)
    assert asked == [20]  # s0 and s1 passed by size: their files were not read
    # s3 is old enough, but after s2 nothing goes: the archive stays contiguous
    asked.clear()
    assert hold_back(segments, 550, delay(5 * MINUTE, -1), largest, now).copyable == 2
    assert asked == [0, 10, 20]
    assert hold_back(segments, 550, delay(0, 300), largest, now) == HeldBack(5)


def test_a_delay_that_copies_nothing_is_named() -> None:
    assert never_copied_problem(RetentionSettings()) is None
    problem = never_copied_problem(
        RetentionSettings(retention_ms=-1, remote_copy_lag_ms=-1, remote_copy_lag_bytes=-1)
    )
    assert problem is not None and "nothing is ever copied" in problem
    # -1 follows local.retention.ms, -2 there follows retention.ms: copied at its deletion
    problem = never_copied_problem(RetentionSettings(retention_ms=MINUTE, remote_copy_lag_ms=-1))
    assert problem is not None and "at or past retention.ms" in problem
    assert never_copied_problem(RetentionSettings(retention_ms=MINUTE, remote_copy_lag_ms=MINUTE))
    assert (
        never_copied_problem(RetentionSettings(retention_ms=5 * MINUTE, remote_copy_lag_ms=MINUTE))
        is None
    )


async def test_a_round_copies_a_segment_only_once_it_is_old_enough(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    pdir = partition(tmp_path / "logs", 1500)
    rolled = pdir.segments()[:-1]
    assert len(rolled) >= 4
    largest = [BASE + s.next_base_offset - 1 for s in rolled]  # type: ignore[operator]
    lag = 10 * MINUTE
    clock = [largest[1] + lag]  # s0 and s1 are old enough, s2 is not
    settings = RetentionSettings(retention_ms=-1, retention_bytes=-1, remote_copy_lag_ms=lag)
    src = source(pdir, settings)
    tp = src.topic_id_partition
    rlm = make_rlm(clock_ms=lambda: clock[0])
    await rlm.on_leadership_changes([src], start_tasks=False)

    result = await rlm.copy_round(tp)
    assert [m.start_offset for m in result.copied] == [s.base_offset for s in rolled[:2]]
    assert (result.held_back, result.held_until_ms) == (len(rolled) - 2, largest[2] + lag)
    assert not result.pending and result.error is None
    # held back is not copy lag: nothing eligible waits
    assert rlm.metrics.copy_lag_segments.labels("orders", "0")._value.get() == 0
    # one millisecond early: still held
    clock[0] = largest[2] + lag - 1
    assert (await rlm.copy_round(tp)).copied == []
    clock[0] = largest[-1] + lag
    rest = await rlm.copy_round(tp)
    assert [m.start_offset for m in rest.copied] == [s.base_offset for s in rolled[2:]]
    assert rest.held_back == 0
    for m in [*result.copied, *rest.copied]:  # each copied once its newest record aged
        assert m.event_timestamp_ms - m.max_timestamp_ms >= lag


async def test_a_round_holds_back_the_segments_within_lag_bytes_of_the_log_end(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    pdir = partition(tmp_path / "logs", 1500)
    rolled = pdir.segments()[:-1]
    active = pdir.segments()[-1].size_in_bytes
    # time off (-1: local retention, -2 there: retention.ms, -1), the last two held
    lag_bytes = rolled[-1].size_in_bytes + active + 1
    settings = RetentionSettings(
        retention_ms=-1, retention_bytes=-1, remote_copy_lag_ms=-1, remote_copy_lag_bytes=lag_bytes
    )
    src = source(pdir, settings)
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    result = await rlm.copy_round(src.topic_id_partition)
    assert [m.start_offset for m in result.copied] == [s.base_offset for s in rolled[:-2]]
    assert (result.held_back, result.held_until_ms) == (2, None)


async def test_an_idle_partition_comes_back_when_the_delay_lets_a_segment_go(
    tmp_path: Path, make_rlm: Callable[..., RemoteLogManager]
) -> None:
    """Nothing on disk changes, yet time does: the round skipped as idle runs again
    once the held segment is old enough, and copies it."""
    pdir = partition(tmp_path / "logs", 900)
    settle(pdir.path)
    rolled = pdir.segments()[:-1]
    lag = MINUTE
    clock = [BASE + rolled[-1].next_base_offset - 1]  # type: ignore[operator]  # all young
    settings = RetentionSettings(retention_ms=-1, retention_bytes=-1, remote_copy_lag_ms=lag)
    src = CountingSource(pdir, settings)
    tp = src.topic_id_partition
    rlm = make_rlm(clock_ms=lambda: clock[0])
    await rlm.on_leadership_changes([src], start_tasks=False)
    first = (await rlm.run_round())[tp][0]
    assert first.copied == [] and first.held_back == len(rolled)
    reads = src.reads
    assert (await rlm.run_round())[tp][0].copied == []
    assert src.reads == reads, "an idle partition held back was read again"
    clock[0] = BASE + rolled[0].next_base_offset - 1 + lag  # type: ignore[operator]
    copied = (await rlm.run_round())[tp][0].copied
    assert [m.start_offset for m in copied] == [rolled[0].base_offset]


def test_the_settings_come_from_offload_its_topics_and_the_cluster(tmp_path: Path) -> None:
    config = make_config(tmp_path, **{
        "offload.remote.copy.lag.ms": 3_600_000,
        "offload.topics.a.remote.copy.lag.bytes": 1 << 30,
    })  # fmt: skip
    settings = OffloadSettings.from_config(config)
    a, origins = settings.effective("a", {"remote.copy.lag.bytes": "5", "remote.copy.lag.ms": "7"})
    assert (a.remote_copy_lag_ms, a.remote_copy_lag_bytes) == (7, 1 << 30)
    assert origins["remote.copy.lag.bytes"] == "offload.topics.a"
    assert origins["remote.copy.lag.ms"] == "cluster"
    b, origins = settings.effective("b", None)  # a cluster that does not know them
    assert (b.remote_copy_lag_ms, b.remote_copy_lag_bytes) == (3_600_000, -1)
    assert origins["remote.copy.lag.ms"] == origins["remote.copy.lag.bytes"] == "offload"

    path = tmp_path / "bad.toml"
    path.write_text('[offload.topics.t]\n"remote.copy.lag.ms" = -2\n')
    with pytest.raises(ConfigError, match=r"offload\.topics\.t\.remote\.copy\.lag\.ms must be"):
        load_config(path, env={})


async def test_the_sidecar_names_a_delay_that_copies_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rlmm.offload.display import Display
    from rlmm.offload.sidecar import Sidecar
    from tests.rlmm.offload.conftest import one_partition_sidecar

    config, logs = one_partition_sidecar(
        tmp_path, '"remote.copy.lag.ms" = -1\n"remote.copy.lag.bytes" = -1\n'
    )
    caplog.set_level(logging.WARNING, logger="rlmm.offload")
    report = await Sidecar(config, [logs], once=True, display=Display(rich=False)).run()
    assert report.tally.copied == 0
    [line] = [r.getMessage() for r in caplog.records if "copy.lag" in r.getMessage()]
    assert line.startswith("topic orders: remote.copy.lag.ms = -1") and "nothing is ever" in line
