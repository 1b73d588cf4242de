"""Reading archived partitions back record by record: codecs, transactions, bounds,
slices inside segments, leader changes, corrupt batches and gaps."""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import uuid
from pathlib import Path
from typing import Any

import pytest

from remote.segments import RecordBatchReader, available_codecs
from rlmm.archive import (
    CorruptBatchError,
    DataLossError,
    ReadRequest,
    Slice,
    open_metadata_view,
    plan_slices,
)
from rlmm.archive.columns import kafka_schema
from rlmm.archive.reader import read_slice
from rlmm.config import RlmmConfig
from rlmm.model import kafka_uuid_to_str
from tests.rlmm.archive.archive_data import (
    Expected,
    archived,
    expected_rows,
    make_config,
    offload,
    rows,
    write_history,
)

CODECS = available_codecs()


def read(config: RlmmConfig, request: ReadRequest) -> tuple[list[Slice], list[tuple[Any, ...]]]:
    with open_metadata_view(config) as view:
        slices = plan_slices(view, request, config.remote_options())
    out = []
    for piece in slices:
        piece = pickle.loads(pickle.dumps(piece))  # what an executor gets
        batches = list(read_slice(piece))
        assert all(b.schema == kafka_schema(request.include_headers) for b in batches)
        out += rows(batches)
    return slices, out


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[RlmmConfig, list[Expected]]:
    """One partition per codec, offloaded: topic ``h-<codec>`` partition 0."""
    tmp = tmp_path_factory.mktemp("archive")
    config = make_config(tmp / "rlmm")
    written = {}
    for codec in CODECS:
        pdir, expected = write_history(tmp / "logs", f"h-{codec}", 0, codec)
        written[codec] = archived(pdir, expected)
        assert len(pdir.segments()) > 4
    asyncio.run(offload(config, [p for p in _dirs(tmp / "logs")]))
    return config, written  # type: ignore[return-value]


def _dirs(parent: Path) -> list[Any]:
    from remote.segments import PartitionDir

    return [PartitionDir(p) for p in sorted(parent.iterdir())]


def test_every_codec_is_available() -> None:
    assert set(CODECS) == {"none", "gzip", "snappy", "lz4", "zstd"}


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_reads_back_record_by_record(history: Any, codec: str) -> None:
    config, written = history
    expected = written[codec]
    request = ReadRequest(topics=(f"h-{codec}",), include_headers=True)
    slices, got = read(config, request)
    assert len(slices) > 4
    assert got == expected_rows(expected)  # read_uncommitted: aborted records too
    assert any(e.aborted for e in expected) and any(e.key is None for e in expected)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_read_committed_drops_aborted_transactions(history: Any, codec: str) -> None:
    config, written = history
    expected = [e for e in written[codec] if not e.aborted]
    request = ReadRequest(topics=(f"h-{codec}",), isolation_level="read_committed")
    slices, got = read(config, request)
    assert got == expected_rows(expected, headers=False)
    assert any(s.aborted_transactions for s in slices)


def test_offset_ranges(history: Any) -> None:
    config, written = history
    expected = written["gzip"]
    for start, end in [(0, 1), (17, 233), (95, 96), (230, 470), (301, expected[-1].offset + 1)]:
        request = ReadRequest(
            topics=("h-gzip",),
            starting_offsets={("h-gzip", 0): start},
            ending_offsets={("h-gzip", 0): end},
        )
        _, got = read(config, request)
        assert got == expected_rows([e for e in expected if start <= e.offset < end], False)


def test_timestamp_ranges(history: Any) -> None:
    config, written = history
    expected = written["lz4" if "lz4" in written else "none"]
    topic = f"h-{'lz4' if 'lz4' in written else 'none'}"
    by_ts = sorted(expected, key=lambda e: e.offset)
    lo_ts, hi_ts = by_ts[30].timestamp, by_ts[300].timestamp
    request = ReadRequest(topics=(topic,), starting_timestamp_ms=lo_ts, ending_timestamp_ms=hi_ts)
    _, got = read(config, request)
    first = next(e.offset for e in by_ts if e.timestamp >= lo_ts)
    last = next(e.offset for e in by_ts if e.timestamp >= hi_ts)
    assert got == expected_rows([e for e in expected if first <= e.offset < last], False)
    # A timestamp after every archived record: Spark's default strategy fails ...
    late = by_ts[-1].timestamp + 1
    with pytest.raises(Exception, match="no record with a timestamp"):
        read(config, ReadRequest(topics=(topic,), starting_timestamp_ms=late))
    # ... and "latest" reads nothing.
    request = ReadRequest(
        topics=(topic,), starting_timestamp_ms=late, starting_timestamp_strategy="latest"
    )
    assert read(config, request) == ([], [])


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.parametrize(("build_rows", "batch_rows"), [(1, 1), (3, 50), (64, 64), (7, 10**6)])
def test_batches_built_in_chunks_and_concatenated(
    history: Any, codec: str, build_rows: int, batch_rows: int, monkeypatch: Any
) -> None:
    """Rows built BUILD_ROWS at a time and yielded batch_rows at a time are the same rows,
    in the same order, in batches of at least batch_rows (the last of a slice aside)."""
    import rlmm.archive.reader as reader

    monkeypatch.setattr(reader, "BUILD_ROWS", build_rows)
    config, written = history
    for level, headers in [("read_uncommitted", True), ("read_committed", False)]:
        request = ReadRequest(
            topics=(f"h-{codec}",), include_headers=headers, isolation_level=level
        )
        with open_metadata_view(config) as view:
            slices = plan_slices(view, request, config.remote_options())
        got = []
        for piece in slices:
            batches = list(read_slice(piece, batch_rows=batch_rows))
            assert all(b.schema == kafka_schema(headers) for b in batches)
            assert all(b.num_rows >= batch_rows for b in batches[:-1])
            assert all(b.num_rows > 0 for b in batches)
            for b in batches:
                b.validate(full=True)
            got += rows(batches)
        kept = [e for e in written[codec] if headers or not e.aborted]
        assert got == expected_rows(kept, headers)


def test_slices_split_inside_segments_and_tile_the_range(history: Any) -> None:
    config, written = history
    request = ReadRequest(topics=("h-none",), max_slice_bytes=1500, include_headers=True)
    slices, got = read(config, request)
    assert got == expected_rows(written["h-none".removeprefix("h-")])
    segments = {s.segment.remote_log_segment_id for s in slices}
    assert len(slices) > 2 * len(segments)  # several slices per segment
    for a, b in itertools.pairwise(slices):
        assert a.until_offset == b.from_offset
        if a.segment == b.segment:
            assert a.end_position == b.start_position
    assert all(s.size_in_bytes <= 1500 for s in slices if s.size_in_bytes > 0)
    # Every split is at a batch boundary of the segment.
    for s in slices:
        assert s.start_position == 0 or _is_batch_start(config, s, s.start_position)


def _is_batch_start(config: RlmmConfig, piece: Slice, position: int) -> bool:
    from rlmm.archive import remote_storage_for

    rsm = remote_storage_for(config.remote_options())
    with rsm.fetch_log_segment(piece.segment, 0) as f:
        data = f.read()
    return position in {h.position for h in RecordBatchReader(data)}


def test_a_slice_boundary_inside_a_transaction(history: Any) -> None:
    """A slice that starts inside an aborted transaction still drops its records."""
    config, written = history
    expected = [e for e in written["none"] if not e.aborted]
    request = ReadRequest(topics=("h-none",), isolation_level="read_committed", max_slice_bytes=700)
    slices, got = read(config, request)
    assert got == expected_rows(expected, headers=False)
    aborted = [e.offset for e in written["none"] if e.aborted]
    assert any(s.from_offset in range(aborted[0] + 1, aborted[-1]) for s in slices)


def test_bounds_prune_segments_before_any_fetch(history: Any) -> None:
    config, written = history
    from remote.layouts.rlmm_layout import RlmmLayout
    from remote.local import LocalRemoteStorageManager

    class Counting(LocalRemoteStorageManager):
        def __init__(self, root: Path) -> None:
            super().__init__(root)
            self.calls: list[tuple[str, int]] = []

        def fetch_index(self, metadata: Any, index_type: Any) -> bytes:
            self.calls.append(("index", metadata.start_offset))
            return super().fetch_index(metadata, index_type)

        def fetch_log_segment(self, metadata: Any, start: int, end: int | None = None) -> Any:
            self.calls.append(("log", metadata.start_offset))
            return super().fetch_log_segment(metadata, start, end)

    rsm = Counting(Path(config.remote_options()["root"]))
    layout = RlmmLayout(rsm)
    key = ("h-none", 0)
    with open_metadata_view(config) as view:
        tp = view.find(*key)
        assert tp is not None
        third = view.lineage(tp)[2]
        request = ReadRequest(
            topics=("h-none",),
            starting_offsets={key: third.start_offset},
            ending_offsets={key: third.end_offset + 1},
        )
        slices = plan_slices(view, request, config.remote_options(), layout=layout)
        assert [s.segment for s in slices] == [third]
        assert rsm.calls == []  # a whole segment: planned from its metadata alone
        request = ReadRequest(
            topics=("h-none",),
            starting_offsets={key: third.start_offset + 50},
            ending_offsets={key: third.end_offset - 20},
        )
        (piece,) = plan_slices(view, request, config.remote_options(), layout=layout)
        assert rsm.calls == [("index", third.start_offset)]  # only the one segment's index
        assert 0 < piece.start_position < piece.end_position < third.segment_size_in_bytes
        got = rows(read_slice(piece))
        assert [r[0] for r in got] == list(range(third.start_offset + 50, third.end_offset - 20))
        # A timestamp bound touches only the segment it falls in (max timestamps prune).
        rsm.calls.clear()
        target = next(e for e in written["none"] if e.offset == third.start_offset + 10)
        request = ReadRequest(topics=("h-none",), starting_timestamp_ms=target.timestamp)
        slices = plan_slices(view, request, config.remote_options(), layout=layout)
        assert {start for _, start in rsm.calls} == {third.start_offset}
        assert slices[0].from_offset == target.offset
    rsm.close()


def test_unknown_topics_and_partitions_are_named(history: Any) -> None:
    config, _ = history
    from rlmm.archive import ArchiveError

    with open_metadata_view(config) as view:
        with pytest.raises(ArchiveError, match="'nope'"):
            plan_slices(view, ReadRequest(topics=("nope",)), config.remote_options())
        with pytest.raises(ArchiveError, match=r"partitions \[3\] of topic 'h-none'"):
            plan_slices(view, ReadRequest(partitions={"h-none": (0, 3)}), config.remote_options())
        slices = plan_slices(view, ReadRequest(pattern=r"h-(none|gzip)"), config.remote_options())
        assert {s.topic for s in slices} == {"h-none", "h-gzip"}


# ---- leader changes, corruption, gaps -------------------------------------------------


def test_leader_change_and_superseded_segments(tmp_path: Path) -> None:
    """Old leader (epoch 0) copied [0, 99]; the new leader (epoch 1, truncated at 80)
    copied [50, 149] and then its segment [150, 200] twice: the reader serves 0..79 from
    the old copy, 80.. from the new leader, and never the superseded copy."""
    from remote.segments import PartitionDirWriter, ProducerRecord
    from rlmm.factory import create_manager, open_event_log, open_remote_storage
    from tests.rlmm.archive.archive_data import copy_segment

    topic_id = uuid.uuid4()

    def records(keys: range, prefix: str) -> list[ProducerRecord]:
        return [ProducerRecord(f"{prefix}{n}".encode(), b"v", (), 1000 + n) for n in keys]

    with PartitionDirWriter(tmp_path / "old", "t", 0, topic_id=topic_id, segment_records=100) as w:
        w.append_records(records(range(0, 101), "k"), batch_records=5)
    with PartitionDirWriter(
        tmp_path / "new", "t", 0, topic_id=topic_id, segment_records=100, start_offset=50
    ) as w:
        w.append_records(records(range(50, 80), "k"), batch_records=5)
        w.set_leader_epoch(1)
        w.append_records(records(range(80, 201), "new"), batch_records=5)
    from remote.segments import PartitionDir

    old, new = PartitionDir(tmp_path / "old" / "t-0"), PartitionDir(tmp_path / "new" / "t-0")
    config = make_config(tmp_path / "rlmm")
    tp = old.topic_id_partition()

    async def copy() -> list[Any]:
        rsm = open_remote_storage(config)
        try:
            async with create_manager(config, open_event_log(config)) as manager:
                await manager.on_partition_leadership_changes([tp], [])
                await manager.wait_until_ready([tp], 30)
                a = await copy_segment(manager, rsm, tp, old.segments()[0])
                b = await copy_segment(manager, rsm, tp, new.segments()[0])
                c1 = await copy_segment(manager, rsm, tp, new.segments()[1])
                c2 = await copy_segment(manager, rsm, tp, new.segments()[1])
                return [a, b, c1, c2]
        finally:
            rsm.close()

    a, b, c1, c2 = asyncio.run(copy())
    assert (b.start_offset, b.end_offset) == (50, 149)
    assert dict(b.segment_leader_epochs) == {0: 50, 1: 80}
    with open_metadata_view(config) as view:
        assert view.lineage(tp) == [a, b, c2]
        assert c1 in view.segments(tp)  # superseded by c2: listed, never read
    slices, got = read(config, ReadRequest(topics=("t",)))
    assert [s.segment for s in slices] == [a, b, c2]
    assert [r[0] for r in got] == list(range(201))
    assert [r[1] for r in got] == [f"{'k' if n < 80 else 'new'}{n}".encode() for n in range(201)]


def test_a_corrupt_batch_is_named_or_skipped(tmp_path: Path, caplog: Any) -> None:
    pdir, expected = write_history(tmp_path / "logs", "c", 0)
    segment = pdir.segments()[1]
    headers = RecordBatchReader(segment.log_path).headers()
    bad = headers[3]
    with open(segment.log_path, "r+b") as f:  # a bit flip in a record value, before upload
        f.seek(bad.position + bad.size_in_bytes - 5)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x40]))
    config = make_config(tmp_path / "rlmm")
    asyncio.run(offload(config, [pdir]))
    with pytest.raises(CorruptBatchError) as caught:
        read(config, ReadRequest(topics=("c",)))
    message = str(caught.value)
    assert f"byte position {bad.position}" in message
    assert "CRC-32C" in message and ".log" in message
    assert caught.value.position == bad.position
    with open_metadata_view(config) as view:
        copied = view.lineage(view.topic_partitions()[0])[1]
    assert kafka_uuid_to_str(copied.remote_log_segment_id.id) in message
    with caplog.at_level(logging.WARNING):
        _, got = read(config, ReadRequest(topics=("c",), fail_on_data_loss=False))
    lost = set(range(bad.base_offset, bad.last_offset + 1))
    assert got == expected_rows(
        [e for e in archived(pdir, expected) if e.offset not in lost], headers=False
    )
    assert f"byte position {bad.position}" in caplog.text


def test_a_gap_is_data_loss_or_skipped(tmp_path: Path, caplog: Any) -> None:
    pdir, expected = write_history(tmp_path / "logs", "g", 0)
    config = make_config(tmp_path / "rlmm")
    missing = pdir.segments()[2]

    async def copy_all_but_one() -> None:
        from rlmm.factory import create_manager, open_event_log, open_remote_storage
        from tests.rlmm.archive.archive_data import copy_segment

        tp = pdir.topic_id_partition()
        rsm = open_remote_storage(config)
        try:
            async with create_manager(config, open_event_log(config)) as manager:
                await manager.on_partition_leadership_changes([tp], [])
                await manager.wait_until_ready([tp], 30)
                for seg in pdir.segments()[:-1]:
                    if seg.base_offset != missing.base_offset:
                        await copy_segment(manager, rsm, tp, seg)
        finally:
            rsm.close()

    asyncio.run(copy_all_but_one())
    gap = (missing.base_offset, pdir.segments()[3].base_offset)
    with pytest.raises(DataLossError, match=rf"offsets \[{gap[0]}, {gap[1]}\) are missing"):
        read(config, ReadRequest(topics=("g",)))
    # A range that avoids the gap reads fine.
    _, got = read(config, ReadRequest(topics=("g",), ending_offsets={("g", 0): gap[0]}))
    assert [r[0] for r in got] == list(range(gap[0]))
    with caplog.at_level(logging.WARNING):
        _, got = read(config, ReadRequest(topics=("g",), fail_on_data_loss=False))
    assert got == expected_rows(
        [e for e in archived(pdir, expected) if not gap[0] <= e.offset < gap[1]], headers=False
    )
    assert "are missing" in caplog.text
    # Offsets beyond the archive are data loss too.
    with pytest.raises(DataLossError, match="not in the archive"):
        read(config, ReadRequest(topics=("g",), ending_offsets={("g", 0): 10**6}))


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_what_readers_learn_equals_what_the_offloader_recorded(
    history: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolation: str
) -> None:
    """Every codec, control batches, aborted transactions (skipped undecoded under
    read_committed): a read's side index entries give each segment the smallest
    timestamp the offloader found over all its records."""
    from remote.layouts.rlmm_layout import RlmmLayout
    from remote.registry import load_remote_layout
    from remote.side_index import SideIndex, smallest_of

    config, _ = history
    layout = load_remote_layout(config.remote_options())
    with open_metadata_view(config) as view:
        segments = [m for tp in view.topic_partitions() for m in view.lineage(tp)]
    recorded = {m.remote_log_segment_id: layout.smallest_timestamp(m) for m in segments}
    assert None not in recorded.values()
    monkeypatch.setattr(RlmmLayout, "smallest_timestamp", lambda self, m: None)
    side = str(tmp_path / "side")
    with open_metadata_view(config) as view:
        for tp in view.topic_partitions():
            request = ReadRequest(partitions={tp.topic: (tp.partition,)}, isolation_level=isolation)
            for piece in plan_slices(view, request, config.remote_options(), side_index=side):
                for _ in read_slice(piece):
                    pass
    index = SideIndex(side)
    for m in segments:
        entries = index.read(m.topic_id_partition).get(m.remote_log_segment_id.id, [])
        learned = smallest_of(entries, m.segment_size_in_bytes)
        assert learned == recorded[m.remote_log_segment_id], m
