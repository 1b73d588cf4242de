"""A broker's worth of partitions: what rounds reuse between them, and that they notice.

Log dir listings are reused while a directory's mtime is unchanged and settled, and a
partition whose last round did nothing is skipped while its inputs are unchanged. These
tests change each input for real (a segment rolled, one deleted, the active segment
grown, the metadata changed by someone else, time passing retention.ms) and check the
next round sees it. Settled mtimes are made with ``os.utime``, as if written long ago.
"""

from __future__ import annotations

import os
import shutil
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from remote.local import LocalRemoteStorageManager
from remote.segments import (
    EpochEntry,
    LogSegmentFiles,
    PartitionDir,
    encode_leader_epoch_checkpoint,
)
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.offload import LogDirSource, RemoteLogManager, RetentionSettings, logdir
from rlmm.offload.log_source import LogSource, LogView
from rlmm.offload.logdir import LogDirCache, scan_log_dirs
from rlmm.offload.settings import OffloadSettings
from tests.rlmm.factories import S, segment, update
from tests.rlmm.offload.conftest import (
    KEEP_ALL,
    check_invariants,
    local_keys,
    make_config,
    write_partition,
)

TOPIC_ID = uuid.UUID(int=0x5CA1E)


def partition(logs: Path, records: int) -> PartitionDir:
    """``orders-0`` with ``records`` records (deterministic: the same prefix every time)."""
    return write_partition(
        logs, "orders", 0, records=records, epochs=(0,), aborted_txn=False, topic_id=TOPIC_ID
    )


def grow(pdir: PartitionDir, tmp: Path, records: int) -> None:
    """The broker appends and rolls: the same partition with more records, written
    aside, its new and changed files moved in (new ``.log`` files last)."""
    staging = tmp / f"staging-{records}"
    bigger = partition(staging, records)
    changed = [
        f
        for f in sorted(bigger.path.iterdir())
        if not (pdir.path / f.name).exists() or (pdir.path / f.name).read_bytes() != f.read_bytes()
    ]
    for f in sorted(changed, key=lambda f: f.suffix == ".log"):
        shutil.copyfile(f, pdir.path / f"{f.name}.tmp")
        os.replace(pdir.path / f"{f.name}.tmp", pdir.path / f.name)
    shutil.rmtree(staging)


def settle(*dirs: Path) -> None:
    """Every file's and directory's mtime a minute back, as if written long ago."""
    old = time.time_ns() - 60 * 10**9
    for d in dirs:
        for f in d.rglob("*"):
            os.utime(f, ns=(old, old))
        os.utime(d, ns=(old, old))


class CountingSource(LogDirSource):
    """A real log dir source that counts how often a round reads its segments."""

    reads = 0

    def view(self) -> LogView:
        self.reads += 1
        return super().view()


def test_change_token_follows_every_change(tmp_path: Path) -> None:
    pdir = partition(tmp_path / "logs", 900)
    src = LogDirSource(pdir, KEEP_ALL)
    assert src.change_token() is None  # just written: mtimes not settled, no promise
    settle(pdir.path)
    token = src.change_token()
    assert token is not None and src.change_token() == token
    rolled = len(src.rolled_segments())

    grow(pdir, tmp_path, 1200)  # a roll: new files in the dir
    settle(pdir.path)
    rolled_token = src.change_token()
    assert rolled_token not in (None, token)
    assert len(src.rolled_segments()) > rolled  # the cached listing was dropped

    with pdir.segments()[-1].log_path.open("ab") as f:  # the active segment grows
        f.write(b"\0" * 7)
    settle(pdir.path)
    grown_token = src.change_token()
    assert grown_token not in (None, rolled_token)

    oldest = pdir.segments()[0]
    for path in (oldest.log_path, oldest.offset_index_path, oldest.time_index_path):
        path.unlink()  # local retention
    settle(pdir.path)
    assert src.change_token() not in (None, grown_token)
    assert src.rolled_segments()[0].base_offset == pdir.segments()[0].base_offset

    before = src.change_token()
    src.set_offsets(log_start_offset=10, high_watermark=None)  # a new checkpoint
    assert src.change_token() != before


def test_a_growing_partition_reads_only_its_active_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy partition (its active segment grows every round, its dir unchanged) costs
    no stat of a rolled segment, no listing, no read of a producer snapshot or of the
    leader epochs: only its active segment. A roll, or a new epochs file, is seen at once."""
    pdir = partition(tmp_path / "logs", 900)
    bigger = partition(tmp_path / "bigger", 905)  # the same log, 5 records on
    settle(pdir.path)
    src = LogDirSource(pdir, KEEP_ALL)

    def view(s: LogDirSource) -> tuple[Any, ...]:
        return (
            s.rolled_segments(), s.log_end_offset(), s.last_stable_offset(),
            tuple(s.leader_epochs()), s.active_segment_size(),
        )  # fmt: skip

    first = view(src)
    reads: Counter[str] = Counter()

    def counted(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counting(*args: Any, **kwargs: Any) -> Any:
            reads[name] += 1
            return fn(*args, **kwargs)

        return counting

    size_of = logdir._file_size
    monkeypatch.setattr(
        logdir, "_file_size", lambda path: counted(os.path.basename(path), size_of)(path)
    )
    monkeypatch.setattr(
        logdir, "read_producer_snapshot", counted("snapshot", logdir.read_producer_snapshot)
    )
    monkeypatch.setattr(
        PartitionDir, "leader_epochs", counted("epochs", PartitionDir.leader_epochs)
    )
    monkeypatch.setattr(PartitionDir, "offsets_of", counted("listing", PartitionDir.offsets_of))

    assert view(src) == first and reads == {"00000000000000000730.log": 1}
    active = pdir.path / "00000000000000000730.log"
    with active.open("ab") as f:  # appended in place, as the broker does: no dir change
        f.write((bigger.path / active.name).read_bytes()[active.stat().st_size :])
    reads.clear()
    grown = view(src)
    assert reads == {"00000000000000000730.log": 1}
    assert grown[1] == 905 and grown[0] == first[0] and grown[4] > first[4]
    assert grown == view(LogDirSource(pdir, KEEP_ALL))

    epochs = pdir.path / "leader-epoch-checkpoint"  # a new leader epoch, file replaced
    tmp = epochs.with_name("leader-epoch-checkpoint.tmp")
    tmp.write_bytes(encode_leader_epoch_checkpoint([EpochEntry(0, 0), EpochEntry(3, 905)]))
    os.replace(tmp, epochs)
    settle(pdir.path)
    reads.clear()
    assert [e.epoch for e in src.leader_epochs()] == [0, 3] and reads["epochs"] == 1

    grow(pdir, tmp_path, 1200)  # a roll
    settle(pdir.path)
    reads.clear()
    rolled = view(src)
    assert reads["listing"] == 1 and rolled[1] == 1200
    assert rolled == view(LogDirSource(pdir, KEEP_ALL))


def test_a_view_is_one_read_of_the_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round's view of a partition stats its dir once and finds the active segment's
    end once (no high watermark: the LSO is that end), and equals what the source's
    methods answer one by one."""
    pdir = partition(tmp_path / "logs", 900)
    settle(pdir.path)
    src = LogDirSource(pdir, KEEP_ALL)
    assert src.view() == LogSource.view(src)
    dir_stats: Counter[str] = Counter()
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        dir_stats[os.fspath(path)] += 1
        return real_stat(path, *args, **kwargs)

    ends = Counter[int]()
    end_offset = LogSegmentFiles.end_offset

    def counted_end(files: LogSegmentFiles) -> int | None:
        ends[files.base_offset] += 1
        return end_offset(files)

    monkeypatch.setattr(logdir.os, "stat", stat)
    monkeypatch.setattr(LogSegmentFiles, "end_offset", counted_end)
    view = src.view()
    assert dir_stats[str(pdir.path)] == 1 and ends == {730: 1}
    assert view.last_stable_offset == view.log_end_offset == 900
    assert view.active_size == (pdir.path / "00000000000000000730.log").stat().st_size


def test_scan_cache_sees_new_partition_dirs_and_topic_ids(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    settings = OffloadSettings.from_config(make_config(tmp_path / "rlmm"))
    write_partition(logs, "orders", 0)
    late = write_partition(logs, "orders", 1)
    metadata = (late.path / "partition.metadata").read_bytes()
    (late.path / "partition.metadata").unlink()
    settle(logs)
    cache = LogDirCache()
    found = scan_log_dirs([logs], settings, cache=cache)
    assert [s.topic_id_partition.partition for s in found] == [0]
    again = scan_log_dirs([logs], settings, cache=cache)
    assert again[0] is found[0]  # the same source, kept across rounds
    (late.path / "partition.metadata").write_bytes(metadata)  # the log dir is unchanged
    settle(logs)
    assert [
        s.topic_id_partition.partition for s in scan_log_dirs([logs], settings, cache=cache)
    ] == [
        0,
        1,
    ]
    write_partition(logs, "clicks", 0)  # a new partition dir
    settle(logs)
    assert len(scan_log_dirs([logs], settings, cache=cache)) == 3
    shutil.rmtree(logs / "orders-0")  # deleted
    assert {str(s.pdir.path.name) for s in scan_log_dirs([logs], settings, cache=cache)} == {
        "orders-1",
        "clicks-0",
    }


async def test_idle_partition_is_skipped_until_something_changes(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    rsm: LocalRemoteStorageManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = partition(tmp_path / "logs", 900)
    settle(pdir.path)
    src = CountingSource(pdir, KEEP_ALL)
    tp = src.topic_id_partition
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    first = (await rlm.run_round())[tp][0]
    assert len(first.copied) == len(pdir.segments()) - 1
    await rlm.run_round()  # nothing new: it reads, finds nothing, and remembers that
    reads = src.reads
    idle = (await rlm.run_round())[tp]
    assert src.reads == reads, "an unchanged idle partition was read again"
    assert idle[0].copied == [] and idle[1].deleted == []

    grow(pdir, tmp_path, 1200)  # one new segment (at least), freshly written
    copied = (await rlm.run_round())[tp][0].copied
    assert copied and src.reads > reads
    live = check_invariants(rlmm_manager, rsm, [pdir], local_keys(rsm.root))
    assert len(live) == len(pdir.segments()) - 1

    # Someone else changes the metadata (a finished copy deleted, leaving a hole): the
    # next round sees it, although the log dir did not change, and copies it again.
    settle(pdir.path)
    await rlm.run_round()
    await rlm.run_round()
    reads = src.reads
    await rlm.run_round()
    assert src.reads == reads
    await rlm._ops.delete(live[1])
    again = (await rlm.run_round())[tp][0].copied
    assert [m.start_offset for m in again] == [m.start_offset for m in live[1:]]


async def test_idle_partition_expires_when_retention_ms_passes(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """Nothing on disk changes, yet time does: the first retention.ms deadline of the
    segments ends the skipping, and that round deletes them."""
    pdir = partition(tmp_path / "logs", 900)
    settle(pdir.path)
    hour = 3_600_000
    clock = [1_700_000_000_000]  # generated timestamps are 1_700_000_000_000 + offset
    src = LogDirSource(pdir, RetentionSettings(retention_ms=hour, retention_bytes=-1))
    tp = src.topic_id_partition
    rlm = make_rlm(clock_ms=lambda: clock[0])
    await rlm.on_leadership_changes([src], start_tasks=False)
    copied = (await rlm.run_round())[tp][0].copied
    await rlm.run_round()
    first_max = min(m.max_timestamp_ms for m in copied)
    clock[0] = first_max + hour - 1
    assert (await rlm.run_round())[tp][1].deleted == []
    clock[0] = first_max + hour
    deleted = (await rlm.run_round())[tp][1].deleted
    assert [v.segment.start_offset for v in deleted] == [copied[0].start_offset]
    assert {v.reason for v in deleted} == {"retention.ms"}
    assert len(rlmm_manager.list_remote_log_segments(tp)) == len(copied) - 1


def test_partition_gauges_render_as_prometheus_client_does(tmp_path: Path) -> None:
    """The per-partition lines, rendered when set, are the lines prometheus_client
    writes for the same gauge; /metrics serves them in both formats, and name[] filters."""
    import urllib.request

    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    from rlmm.model import TopicIdPartition
    from rlmm.offload.metrics import OffloadMetrics

    metrics = OffloadMetrics()
    reference = CollectorRegistry()
    plain = Gauge(
        "rlmm_remote_copy_lag_bytes",
        "Bytes eligible but not yet copied (RemoteCopyLagBytes)",
        ("topic", "partition"),
        registry=reference,
    )
    for i, (topic, value) in enumerate([("orders", 0), ("a.b_c-d", 12345678901), ("x", 1e20)]):
        tp = TopicIdPartition(uuid.uuid4(), topic, i)
        metrics.set_copy_lag(tp, int(value), 1)
        plain.labels(topic, str(i)).set(int(value))
    mine = metrics.partition_exposition(["rlmm_remote_copy_lag_bytes"]).decode()
    assert mine == generate_latest(reference).decode()
    # the registry itself still holds them, for an embedder's own exporter
    full = generate_latest(metrics.registry).decode()
    assert mine.splitlines()[2] in full and mine.splitlines()[-1] in full

    server = metrics.serve(0)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'rlmm_remote_copy_lag_bytes{partition="0",topic="orders"} 0.0' in text
        assert "rlmm_offload_rounds_total" in text
        request = urllib.request.Request(
            url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        om = urllib.request.urlopen(request, timeout=10).read().decode()
        assert om.endswith("# EOF\n") and om.count("# EOF") == 1
        assert 'rlmm_remote_copy_lag_segments{partition="0",topic="orders"} 1.0' in om
        only = urllib.request.urlopen(f"{url}?name[]=rlmm_remote_copy_lag_segments", timeout=10)
        lines = only.read().decode().splitlines()
        assert lines and all("rlmm_remote_copy_lag_segments" in line for line in lines)
    finally:
        server.close()


def rewrite_checkpoint(logs: Path) -> None:
    """As Kafka writes its log dir checkpoints every few seconds: a new file renamed in."""
    tmp = logs / "replication-offset-checkpoint.tmp"
    tmp.write_text("0\n0\n")
    os.replace(tmp, logs / "replication-offset-checkpoint")


def test_sources_outlive_checkpoint_rewrites_not_a_recreated_dir(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    settings = OffloadSettings.from_config(make_config(tmp_path / "rlmm"))
    write_partition(logs, "orders", 0)
    write_partition(logs, "orders", 1)
    settle(logs)
    cache = LogDirCache()
    first = {s.pdir.path.name: s for s in scan_log_dirs([logs], settings, cache=cache)}
    rewrite_checkpoint(logs)  # the log dir's mtime moves, no partition changed
    settle(logs)
    again = {s.pdir.path.name: s for s in scan_log_dirs([logs], settings, cache=cache)}
    assert again == first and all(again[n] is first[n] for n in first)

    # Kafka deletes a partition by renaming its dir away, and a new one may follow
    os.rename(logs / "orders-0", logs / "orders-0.0123456789abcdef0123456789abcdef-delete")
    recreated = uuid.uuid4()  # a topic deleted and created again has a new id
    write_partition(logs, "orders", 0, topic_id=recreated)
    settle(logs)
    after = {s.pdir.path.name: s for s in scan_log_dirs([logs], settings, cache=cache)}
    assert after["orders-1"] is first["orders-1"]
    assert after["orders-0"] is not first["orders-0"]
    assert after["orders-0"].topic_id_partition.topic_id == recreated


def test_a_partition_the_brokers_checkpoint_does_not_list_yet_has_nothing_eligible(
    tmp_path: Path,
) -> None:
    # Without the broker's LSO, the high watermark bounds the copies. A log dir with no
    # replication-offset-checkpoint at all (an offline copy) is bounded by its log end;
    # a broker's, whose checkpoint does not list the partition yet (Kafka creates it
    # empty at start and fills it every few seconds), has nothing known to be
    # replicated: it bounded the copies by the log end too, unreplicated records included.
    logs = tmp_path / "logs"
    settings = OffloadSettings.from_config(make_config(tmp_path / "rlmm"))
    pdir = write_partition(logs, "orders", 0, aborted_txn=False)
    bases = [s.base_offset for s in pdir.segments()]
    settle(logs)
    [offline] = scan_log_dirs([logs], settings)
    assert offline.last_stable_offset() == offline.log_end_offset() > bases[-1]
    rewrite_checkpoint(logs)  # empty, as at the broker's start
    settle(logs)
    [unlisted] = scan_log_dirs([logs], settings)
    assert unlisted.last_stable_offset() == unlisted.log_start_offset() == 0
    tmp = logs / "replication-offset-checkpoint.tmp"
    tmp.write_text(f"0\n1\norders 0 {bases[2]}\n")
    os.replace(tmp, logs / "replication-offset-checkpoint")
    settle(logs)
    [listed] = scan_log_dirs([logs], settings)
    assert listed.last_stable_offset() == bases[2]


async def test_the_sidecar_leads_a_partition_once_not_every_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds over unchanged partitions lead nothing again, a checkpoint rewritten in the
    log dir included; a partition dir that appears is led alone."""
    from rlmm.config import load_config
    from rlmm.offload.display import Display
    from rlmm.offload.sidecar import Sidecar

    logs = tmp_path / "logs"
    write_partition(logs, "orders", 0)
    write_partition(logs, "orders", 1)
    config = tmp_path / "offload.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[eventlog]\npartitions = 4\nfsync = "interval"\n'
        '[offload]\n"retention.ms" = -1\n"remote.log.manager.task.interval.ms" = 100\n'
    )
    led: list[list[str]] = []
    lead_once = RemoteLogManager.on_leadership_changes

    async def spy(
        self: RemoteLogManager, leaders: Sequence[LogDirSource], *a: Any, **k: Any
    ) -> None:
        led.append(sorted(s.pdir.path.name for s in leaders))
        await lead_once(self, leaders, *a, **k)

    monkeypatch.setattr(RemoteLogManager, "on_leadership_changes", spy)
    sidecar = Sidecar(load_config(config, env={}), [logs], display=Display(rich=False))
    done = sidecar.display.round_done
    calls_at: dict[int, int] = {}

    def round_done(*a: object, **k: object) -> None:
        done(*a, **k)  # type: ignore[arg-type]
        n = sidecar.display.rounds
        calls_at[n] = len(led)
        if n == 2:
            settle(logs)
        elif n == 3:
            rewrite_checkpoint(logs)
        elif n == 5:
            write_partition(logs, "clicks", 0)
        elif n == 7:
            sidecar.stop()

    sidecar.display.round_done = round_done  # type: ignore[method-assign]
    report = await sidecar.run()
    assert report.rounds == 7 and report.led == 3
    assert led[0] == ["orders-0", "orders-1"]
    assert calls_at[5] == 1, f"unchanged partitions led again: {led}"
    assert led[1:] == [["clicks-0"]]
    assert sidecar.metrics.leadership_changes._value.get() == 3


def test_the_active_segment_is_read_without_its_preallocated_index(tmp_path: Path) -> None:
    # Kafka preallocates an active segment's .index at segment.index.bytes (10 MiB of
    # zeros); each round asks every led partition for its log end offset: reading that
    # file whole cost 10 MiB a partition a round (6 at once under the file slots).
    import tracemalloc

    from remote.segments import read_offset_index

    pdir = partition(tmp_path / "logs", 900)
    active = pdir.segments()[-1]
    written = active.offset_index_path.read_bytes()
    active.offset_index_path.write_bytes(written + bytes(10 * 1024 * 1024))
    src = LogDirSource(pdir, KEEP_ALL)
    expected = active.end_offset()
    assert read_offset_index(active.offset_index_path, active.base_offset)  # still parses
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        end = src.log_end_offset()
        size = src.active_segment_size()
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert expected is not None and end == expected + 1
    assert size == active.log_path.stat().st_size
    assert peak < 1024 * 1024, f"{peak} bytes allocated for the active segment's end"


async def test_a_round_over_a_large_archive_holds_no_object_per_kept_segment(
    tmp_path: Path,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    """A partition keeps 2,000 remote segments: a busy round reads them from the cache's
    columns (the hole check, the idle deadline, the foreign check) or one summary at a
    time (expiry's totals and walk, the lineage check). Listing them all, several times
    a round and across awaits, is what kept a long-running sidecar's memory resident in
    proportion to its archive."""
    pdir = partition(tmp_path / "logs", 300)
    src = LogDirSource(pdir, KEEP_ALL)
    tp = src.topic_id_partition
    kept = 2_000
    await rlmm_manager.on_partition_leadership_changes([tp], [])
    await rlmm_manager.wait_until_ready([tp], 30)
    for i in range(kept):  # the archive reaches past the local log: nothing left to copy
        m = segment(tp, i * 10, i * 10 + 9, {0: i * 10}, size=100)
        await rlmm_manager.add_remote_log_segment_metadata(m)
        await rlmm_manager.update_remote_log_segment_metadata(update(m, S.COPY_SEGMENT_FINISHED))
    rlm = make_rlm()
    await rlm.on_leadership_changes([src], start_tasks=False)
    await rlm.copy_round(tp)
    await rlm.expire_round(tp)  # warm: the round's own one-off allocations are made
    listing = rlmm_manager.list_remote_log_segments(tp)
    tracemalloc.start()
    try:
        await rlm.copy_round(tp)
        await rlm.expire_round(tp)
        _, round_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        listing = rlmm_manager.list_remote_log_segments(tp)
        _, listing_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(listing) == kept
    # One listing of the archive holds ~1 KiB a segment; the whole round, a fraction.
    assert round_peak < listing_peak / 4, (round_peak, listing_peak)
