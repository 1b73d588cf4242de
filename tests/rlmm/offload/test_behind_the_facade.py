"""The offloader behind the fail-closed facade: its manager swapped while it runs.

A RemoteLogManager runs its per-partition task over a real partition dir, the file event
log and the local store, through a SwappableRlmm. Swapping in a NotReadyRlmm with a copy
in flight stops the copies (fail closed: nothing written, nothing read as "empty"); a new
manager over the same event log, swapped in and led again as the sidecar's next poll
does, resumes them: every rolled segment is archived exactly once, contiguously, and
``verify --deep`` finds nothing wrong, even past the safety window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from remote.local import LocalRemoteStorageManager
from rlmm.archive import open_metadata_view
from rlmm.errors import RemoteStorageNotReadyError
from rlmm.facade import NotReadyRlmm, SwappableRlmm
from rlmm.factory import create_manager, open_event_log, open_remote_layout, open_remote_storage
from rlmm.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, kafka_uuid_to_str
from rlmm.offload import OffloadEvent, RemoteLogManager
from rlmm.ops.verification import verify
from tests.rlmm.offload.conftest import (
    S,
    check_invariants,
    local_keys,
    make_config,
    segment_ids_of_keys,
    source,
    write_partition,
)

INTERVAL_S = 0.05
SWAP_AT = 3  # the rolled segment whose copy is in flight when the manager goes away


def _ids(segments: list[RemoteLogSegmentMetadata]) -> set[str]:
    return {kafka_uuid_to_str(m.remote_log_segment_id.id) for m in segments}


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(INTERVAL_S)


async def test_a_manager_swapped_under_a_running_offloader(tmp_path: Path) -> None:
    config = make_config(tmp_path / "rlmm")
    pdir = write_partition(tmp_path / "logs", "orders", 0, records=1200)
    segments = pdir.segments()
    rolled = segments[:-1]
    assert len(rolled) > SWAP_AT + 1
    src = source(pdir)
    tp = src.topic_id_partition
    rsm = open_remote_storage(config)
    assert isinstance(rsm, LocalRemoteStorageManager)
    first = create_manager(config, open_event_log(config))
    await first.start()
    facade = SwappableRlmm()
    facade.swap(first)

    events: list[OffloadEvent] = []
    in_flight: list[RemoteLogSegmentId] = []
    swapped = asyncio.Event()

    def listen(event: OffloadEvent) -> None:
        events.append(event)
        m = event.segment
        if (
            event.kind == "copy_started"
            and m is not None
            and m.start_offset == rolled[SWAP_AT].base_offset
            and not swapped.is_set()
        ):
            # its STARTED is applied, its upload comes next: the manager goes away
            facade.swap(NotReadyRlmm("swapped out by the test"))
            in_flight.append(m.remote_log_segment_id)
            swapped.set()

    rlm = RemoteLogManager(
        facade, rsm, task_interval_s=INTERVAL_S, retry_backoff_s=0.0, listener=listen
    )
    second = None
    try:
        await rlm.on_leadership_changes([src])  # starts the partition's task
        await asyncio.wait_for(swapped.wait(), 30)
        applied = first.applied_offsets

        # -- NotReadyRlmm: copies stop and fail closed -----------------------------------------
        def attempt_ended() -> bool:
            ended = (e.segment for e in events if e.kind == "copy_ended")
            return any(m is not None and m.remote_log_segment_id == in_flight[0] for m in ended)

        await _until(attempt_ended, "the attempt in flight to end")
        await asyncio.sleep(20 * INTERVAL_S)  # many rounds of the task
        with pytest.raises(RemoteStorageNotReadyError):
            rlm.highest_remote_offset(tp)  # never "nothing archived": that would copy from 0
        assert not (await rlm.copy_round(tp)).copied
        assert first.applied_offsets == applied  # nothing published since the swap
        copied = [e.segment for e in events if e.kind == "copied" and e.segment is not None]
        assert [m.start_offset for m in copied] == [s.base_offset for s in rolled[:SWAP_AT]]
        assert [e.kind for e in events].count("copy_started") == SWAP_AT + 1
        # The attempt in flight failed and deleted its objects; its STARTED stays behind,
        # for the next ready manager's cleanup. Only the finished copies have objects.
        by_state = {m.remote_log_segment_id: m.state for m in first.list_remote_log_segments(tp)}
        assert by_state == {
            **{m.remote_log_segment_id: S.COPY_SEGMENT_FINISHED for m in copied},
            in_flight[0]: S.COPY_SEGMENT_STARTED,
        }
        assert segment_ids_of_keys(local_keys(rsm.root)) == _ids(copied)

        # -- a new manager over the same event log: copies resume -----------------------------
        await first.close()  # its final snapshot; the event log's writer lock is let go
        second = create_manager(config, open_event_log(config))
        await second.start()
        facade.swap(second)
        await rlm.on_leadership_changes([src])  # as the sidecar's poll leads it again

        def archived() -> bool:
            listed = facade.list_remote_log_segments(tp)
            starts = [m.start_offset for m in listed if m.state == S.COPY_SEGMENT_FINISHED]
            return len(starts) == len(listed) and starts == [s.base_offset for s in rolled]

        await _until(archived, "the rest of the segments archived and the attempt cleaned up")
        await rlm.close()

        live = check_invariants(facade, rsm, [pdir], local_keys(rsm.root))
        assert [(m.start_offset, m.end_offset) for m in live] == [
            (s.base_offset, after.base_offset - 1)
            for s, after in zip(rolled, segments[1:], strict=True)
        ]
        copied = [e.segment for e in events if e.kind == "copied" and e.segment is not None]
        assert [m.start_offset for m in copied] == [s.base_offset for s in rolled]  # once each
        deleted = [e.segment for e in events if e.kind == "deleted" and e.segment is not None]
        # the abandoned attempt, through the DELETE path
        assert [m.remote_log_segment_id for m in deleted] == in_flight
    finally:
        await rlm.close()
        await first.close()
        if second is not None:
            await second.close()
        rsm.close()

    later = int(time.time() * 1000) + 2 * 3600 * 1000  # a leftover would be reported
    with open_metadata_view(config) as view, open_remote_layout(config) as layout:
        report = verify(view, layout, deep=True, now_ms=later)
    assert report.problems == [] and report.segments_checked == len(rolled)
