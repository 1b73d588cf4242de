"""S3 faults (5xx, throttling, timeouts, dropped connections, a crash between parts)
during copy and expiration rounds against the moto server: same invariants as the
kill tests once the faults stop and one more round has run."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

from remote.s3 import S3RemoteStorageManager
from remote.segments import PartitionDir
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.offload import RemoteLogManager, RetentionSettings
from tests.remote.conftest import Backend, _s3_backend
from tests.remote.test_s3 import xml_response
from tests.remote.test_s3_faults import _sent, only_for
from tests.rlmm.offload.conftest import check_invariants, source, write_partition

pytestmark = pytest.mark.s3

MiB = 1024 * 1024


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    from botocore.retries import standard

    # botocore retries without sleeping (its throttling backoff starts at 1 s)
    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, ctx: 0)
    b = _s3_backend(
        "s3-server",
        endpoint_url=s3_endpoint,
        max_attempts=2,
        retry_mode="standard",
        multipart_threshold=5 * MiB,
        part_size=5 * MiB,
        max_concurrency=2,
        # The copy fails once the client's retries ran out: these tests are about the
        # rounds around a failed copy (test_a_copy_rides_out_faults is about the tries).
        copy_retry_s=0,
    )
    yield b
    b.rsm.close()


def failing(times: int, make: Callable[[AWSRequest], AWSResponse | None]) -> Callable[..., Any]:
    count = [0]
    lock = threading.Lock()

    def hook(request: AWSRequest, **_: Any) -> AWSResponse | None:
        with lock:
            if count[0] >= times:
                return None
            count[0] += 1
        return make(request)

    return hook


def error(status: int, code: str) -> Callable[[AWSRequest], AWSResponse]:
    body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>"
    return lambda r: xml_response(r, status, body)


def timeout(request: AWSRequest) -> AWSResponse:
    raise ReadTimeoutError(endpoint_url=str(request.url))


def dropped(request: AWSRequest) -> AWSResponse:
    raise ConnectionClosedError(endpoint_url=str(request.url))


def register(b: Backend, operation: str, hook: Callable[..., Any]) -> None:
    assert isinstance(b.rsm, S3RemoteStorageManager)
    b.rsm.client.meta.events.register(f"before-send.s3.{operation}", hook)


def s3_backend(endpoint: str, **settings: Any) -> Backend:
    """A store of its own on the test's bucket, with ``settings`` (close it)."""
    return _s3_backend(
        "s3-server", create_bucket=False, endpoint_url=endpoint, retry_mode="standard",
        max_concurrency=2, **settings,
    )  # fmt: skip


def counted_adds(manager: TopicBasedRemoteLogMetadataManager) -> list[Any]:
    """The metadata of every copy attempt ``manager`` is told of from now on."""
    added: list[Any] = []
    add = manager.add_remote_log_segment_metadata

    async def counting_add(metadata: Any) -> None:
        added.append(metadata)
        await add(metadata)

    manager.add_remote_log_segment_metadata = counting_add  # type: ignore[method-assign]
    return added


def unregister(b: Backend, operation: str, hook: Callable[..., Any]) -> None:
    assert isinstance(b.rsm, S3RemoteStorageManager)
    b.rsm.client.meta.events.unregister(f"before-send.s3.{operation}", hook)


async def outage_of(b: Backend, seconds: float, copying: asyncio.Future[Any]) -> None:
    """Until ``b``'s store has been in an outage (its probes refused) for ``seconds``,
    the copy ``copying`` still waiting."""
    assert isinstance(b.rsm, S3RemoteStorageManager)
    give_up_at = time.monotonic() + 30
    while b.rsm._uploader.pause.outage_s() < seconds:
        assert time.monotonic() < give_up_at and not copying.done(), "no outage"
        await asyncio.sleep(0.1)


def keys(b: Backend) -> list[str]:
    return b.list_keys()


FAULTS: dict[str, list[tuple[str, Callable[..., Any]]]] = {
    "5xx": [("PutObject", failing(5, error(500, "InternalError")))],
    "throttling": [("PutObject", failing(5, error(503, "SlowDown")))],
    "timeouts": [("PutObject", failing(3, timeout)), ("HeadObject", failing(2, timeout))],
    "dropped": [("PutObject", failing(4, dropped))],
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_copy_and_expire_under_s3_faults(
    tmp_path: Path,
    fault: str,
    s3: Backend,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdirs = [write_partition(tmp_path, "orders", p, records=600) for p in range(2)]
    keep = sum(s.size_in_bytes for s in pdirs[0].segments()) // 2
    retention = RetentionSettings(retention_ms=-1, retention_bytes=keep)
    rlm = make_rlm(store=s3.rsm, copy_attempts=2)
    await rlm.on_leadership_changes([source(p, retention) for p in pdirs], start_tasks=False)
    for operation, hook in FAULTS[fault]:
        register(s3, operation, hook)
    register(s3, "DeleteObjects", failing(8, error(503, "SlowDown")))
    await rlm.run_round()  # faults: some copies and deletions fail, are cleaned, retried
    assert rlm.metrics.copy_errors.labels("orders")._value.get() >= 1
    assert rlm.metrics.delete_errors.labels("orders")._value.get() >= 1
    await rlm.run_round()  # faults are over: this round completes the work
    await _settle(rlm, rlmm_manager, s3, pdirs)


async def test_a_copy_rides_out_faults_with_one_attempt_per_segment(
    tmp_path: Path,
    s3_endpoint: str,
    s3: Backend,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    # The faults of test_copy_and_expire_under_s3_faults' "throttling" case, which fail
    # copies there (copy_retry_s = 0): with the copy's own tries, each segment is copied
    # by its first attempt. Every attempt writes its segment's metadata, whose size the
    # soak counts as uploaded: failed attempts are what made it upload more than once.
    retrying = s3_backend(
        s3_endpoint, max_attempts=2, multipart_threshold=5 * MiB, part_size=5 * MiB,
        copy_retry_s=10,
    )  # fmt: skip
    try:
        pdirs = [write_partition(tmp_path, "orders", p, records=600) for p in range(2)]
        rlm = make_rlm(store=retrying.rsm, copy_attempts=2)
        await rlm.on_leadership_changes([source(p) for p in pdirs], start_tasks=False)
        register(retrying, "PutObject", failing(5, error(503, "SlowDown")))
        added = counted_adds(rlmm_manager)
        await rlm.run_round()
        assert rlm.metrics.copy_errors.labels("orders")._value.get() == 0
        rolled = sum(len(p.segments()) - 1 for p in pdirs)
        ids = {str(m.remote_log_segment_id) for m in added}
        assert len(added) == rolled == len(ids)  # one attempt per segment
        await _settle(rlm, rlmm_manager, retrying, pdirs)
    finally:
        retrying.rsm.close()


async def test_a_copy_waits_out_an_outage_and_a_paused_store_starts_no_copy(
    tmp_path: Path,
    s3_endpoint: str,
    s3: Backend,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    # S3 refuses one copy's time index, then its probes too: an outage. The copy in
    # flight waits it out past its copy_retry_s (its task can be cancelled, so the
    # outage is not counted) and lands with its first attempt; a round of another
    # partition meanwhile starts no copy (no metadata, no byte sent) and counts a "not
    # started" copy error; once S3 answers, everything is copied and nothing is left.
    b = s3_backend(s3_endpoint, max_attempts=1, copy_retry_s=1.6)
    try:
        assert isinstance(b.rsm, S3RemoteStorageManager)
        pdirs = [write_partition(tmp_path, "orders", p, records=600) for p in range(2)]
        waiting, other = (p.topic_id_partition() for p in pdirs)
        rlm = make_rlm(store=b.rsm, copy_attempts=1)
        await rlm.on_leadership_changes([source(p) for p in pdirs], start_tasks=False)
        slow_down = error(503, "SlowDown")

        def refuse_time_index(request: AWSRequest, **_: Any) -> AWSResponse | None:
            return slow_down(request) if ".timeindex" in str(request.url) else None

        def refuse(request: AWSRequest, **_: Any) -> Any:  # every probe
            return slow_down(request)

        added = counted_adds(rlmm_manager)
        register(b, "PutObject", refuse_time_index)
        probes = b.rsm.probe_client.meta.events
        probes.register("before-send.s3.HeadBucket", refuse)
        first = asyncio.ensure_future(rlm.copy_round(waiting))
        await outage_of(b, 2.0, first)  # past copy_retry_s
        errors = rlm.metrics.copy_errors.labels("orders")
        assert errors._value.get() == 0 and len(added) == 1  # still its first attempt
        held = rlm.metrics.registry.get_sample_value("rlmm_remote_storage_paused_seconds_total")
        assert held is not None and held >= 2.0  # what RlmmRemoteStorageRefusing watches
        sent, before = _sent(b), len(added)
        second = await rlm.copy_round(other)
        assert second.error is not None and "not started" in str(second.error)
        assert sent == [] and len(added) == before and errors._value.get() == 1
        unregister(b, "PutObject", refuse_time_index)
        probes.unregister("before-send.s3.HeadBucket", refuse)
        done = await asyncio.wait_for(first, 30)
        assert done.error is None and len(done.copied) == len(pdirs[0].segments()) - 1
        assert len({m.start_offset for m in added}) == len(added)  # one attempt each
        third = await rlm.copy_round(other)
        assert third.error is None and len(third.copied) == len(pdirs[1].segments()) - 1
        await _settle(rlm, rlmm_manager, b, pdirs)
    finally:
        b.rsm.close()


async def test_a_copy_cancelled_while_it_waits_out_an_outage_ends_at_once(
    tmp_path: Path,
    s3_endpoint: str,
    s3: Backend,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    # Leadership lost (the round's task cancelled) while a copy waits for S3: the copy
    # gives up at its next wait instead of when the outage ends, and its attempt is
    # cleaned up once S3 answers (here: the metadata deleted, nothing stored).
    b = s3_backend(s3_endpoint, max_attempts=1, copy_retry_s=1.0)
    try:
        assert isinstance(b.rsm, S3RemoteStorageManager)
        pdir = write_partition(tmp_path, "orders", 0, records=600)
        rlm = make_rlm(store=b.rsm, copy_attempts=1)
        await rlm.on_leadership_changes([source(pdir)], start_tasks=False)
        refused = [True]

        def refuse(request: AWSRequest, **_: Any) -> AWSResponse | None:
            return error(503, "SlowDown")(request) if refused[0] else None

        register(b, "PutObject", only_for(".timeindex", refuse))
        b.rsm.probe_client.meta.events.register("before-send.s3.HeadBucket", refuse)
        task = asyncio.ensure_future(rlm.copy_round(pdir.topic_id_partition()))
        await outage_of(b, 1.5, task)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert time.monotonic() - cancelled_at < 2.0
        assert rlm.metrics.copy_errors.labels("orders")._value.get() == 0
        refused[0] = False
        give_up_at = time.monotonic() + 30
        while b.rsm.paused_for_s() > 0:
            assert time.monotonic() < give_up_at, "the pause never ran out"
            await asyncio.sleep(0.1)
        await _settle(rlm, rlmm_manager, b, [pdir])
    finally:
        b.rsm.close()


async def test_crash_between_parts_of_a_multipart_upload(
    tmp_path: Path,
    s3: Backend,
    rlmm_manager: TopicBasedRemoteLogMetadataManager,
    make_rlm: Callable[..., RemoteLogManager],
) -> None:
    pdir = write_partition(
        tmp_path,
        "big",
        0,
        records=16_000,
        value_size=1000,
        segment_bytes=6 * MiB,
        epochs=(0,),
        aborted_txn=False,
    )
    assert len(pdir.segments()) >= 3

    def part_two_dies(request: AWSRequest, **_: Any) -> AWSResponse | None:
        if "partNumber=2" in str(request.url):
            raise ConnectionClosedError(endpoint_url=str(request.url))
        return None

    register(s3, "UploadPart", part_two_dies)
    rlm = make_rlm(store=s3.rsm, copy_attempts=1)
    await rlm.on_leadership_changes([source(pdir)], start_tasks=False)
    result = await rlm.copy_round(pdir.topic_id_partition())
    assert result.error is not None and result.copied == []
    assert "00000000000000000000.log" in str(result.error)
    assert keys(s3) == [] and s3.open_uploads() == []
    unregister(s3, "UploadPart", part_two_dies)
    await _settle(rlm, rlmm_manager, s3, [pdir])


async def _settle(
    rlm: RemoteLogManager,
    manager: TopicBasedRemoteLogMetadataManager,
    s3: Backend,
    pdirs: list[PartitionDir],
) -> None:
    """A restart's view: leftovers cleaned, one more round, then the invariants."""
    await rlm.run_round()
    live = check_invariants(manager, s3.rsm, pdirs, keys(s3))
    assert s3.open_uploads() == []
    for pdir in pdirs:
        tp = pdir.topic_id_partition()
        starts = [m.start_offset for m in live if m.topic_id_partition == tp]
        rolled = [s.base_offset for s in pdir.segments()[:-1]]
        assert starts and starts == rolled[len(rolled) - len(starts) :], "hole in the lineage"
