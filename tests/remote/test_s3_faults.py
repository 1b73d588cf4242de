"""Fault injection against the moto server (real HTTP on loopback) through botocore hooks.

A hook on ``before-send.s3.<Operation>`` answers in place of the server (5xx, SlowDown,
AccessDenied) or raises the connection errors urllib3 would; the request then never
reaches the server. After every failed copy, nothing of the segment may be left: no
object, no open multipart upload.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

from remote import IndexType, RemoteStorageError, RemoteStorageUnavailableError
from rlmm.model import RemoteLogSegmentMetadata
from tests.remote.conftest import Backend, S3Factory, make_metadata, write_segment
from tests.remote.test_s3 import MULTIPART, MiB, xml_response

pytestmark = [pytest.mark.s3, pytest.mark.usefixtures("no_backoff")]

Hook = Callable[..., AWSResponse | None]


def error_xml(code: str) -> str:
    return f"<Error><Code>{code}</Code><Message>injected</Message></Error>"


def failing(times: int, make: Callable[[AWSRequest], AWSResponse | None]) -> tuple[Hook, list[int]]:
    """A hook that fails the first ``times`` matching requests (all when times < 0)."""
    count = [0]
    lock = threading.Lock()

    def hook(request: AWSRequest, **_: Any) -> AWSResponse | None:
        with lock:
            if 0 <= times <= count[0]:
                return None
            count[0] += 1
        return make(request)

    return hook, count


@pytest.fixture
def big(s3_server_factory: S3Factory) -> Backend:
    # Standard mode: adaptive mode's client-side rate limiter slows every request after a
    # throttling error (by design); that is exercised on its own, below. No tries of the
    # copy's own after the client's: these tests are about botocore's and the clean-up.
    return s3_server_factory(
        max_attempts=3, max_concurrency=3, retry_mode="standard", copy_retry_s=0, **MULTIPART
    )


def register(b: Backend, operation: str, hook: Hook) -> None:
    b.rsm.client.meta.events.register(f"before-send.s3.{operation}", hook)  # type: ignore[attr-defined]


def assert_nothing_left(b: Backend) -> None:
    assert b.list_keys() == []
    assert b.open_uploads() == []


@pytest.mark.parametrize(
    ("operation", "status", "code"),
    [
        ("UploadPart", 500, "InternalError"),
        ("UploadPart", 503, "SlowDown"),
        ("PutObject", 503, "SlowDown"),
        ("CreateMultipartUpload", 503, "ServiceUnavailable"),
        ("CompleteMultipartUpload", 500, "InternalError"),
    ],
)
def test_transient_errors_are_retried(
    big: Backend, tmp_path: Path, operation: str, status: int, code: str
) -> None:
    hook, count = failing(2, lambda r: xml_response(r, status, error_xml(code)))
    register(big, operation, hook)
    seg = write_segment(tmp_path / "l", 12 * MiB)
    metadata = make_metadata()
    big.rsm.copy_log_segment_data(metadata, seg.data)
    assert count == [2]
    assert big.open_uploads() == []
    with big.rsm.fetch_log_segment(metadata, 0) as stream:
        assert stream.read() == seg.contents["log_segment"]


@pytest.mark.slow
def test_adaptive_mode_absorbs_throttling(s3_server_factory: S3Factory, tmp_path: Path) -> None:
    b = s3_server_factory(max_attempts=4, **MULTIPART)  # retry_mode="adaptive", the default
    hook, count = failing(2, lambda r: xml_response(r, 503, error_xml("SlowDown")))
    register(b, "UploadPart", hook)
    seg = write_segment(tmp_path / "l", 11 * MiB)
    metadata = make_metadata()
    b.rsm.copy_log_segment_data(metadata, seg.data)
    assert count == [2]
    with b.rsm.fetch_log_segment(metadata, 0) as stream:
        assert stream.read() == seg.contents["log_segment"]


def test_timeouts_and_dropped_connections_are_retried(big: Backend, tmp_path: Path) -> None:
    def timeout(request: AWSRequest) -> AWSResponse:
        raise ReadTimeoutError(endpoint_url=str(request.url))

    def dropped(request: AWSRequest) -> AWSResponse:
        raise ConnectionClosedError(endpoint_url=str(request.url))

    register(big, "UploadPart", failing(2, timeout)[0])
    register(big, "PutObject", failing(1, dropped)[0])
    register(big, "GetObject", failing(1, dropped)[0])
    seg = write_segment(tmp_path / "l", 12 * MiB)
    metadata = make_metadata()
    big.rsm.copy_log_segment_data(metadata, seg.data)
    assert big.rsm.fetch_index(metadata, IndexType.OFFSET) == seg.contents["offset_index"]


def test_crash_between_parts_leaves_nothing(big: Backend, tmp_path: Path) -> None:
    def part_two_dies(request: AWSRequest, **_: Any) -> AWSResponse | None:
        if "partNumber=2" in str(request.url):
            raise ConnectionClosedError(endpoint_url=str(request.url))
        return None

    register(big, "UploadPart", part_two_dies)
    with pytest.raises(RemoteStorageUnavailableError, match=r"\.log") as info:
        big.rsm.copy_log_segment_data(make_metadata(), write_segment(tmp_path / "l", 12 * MiB).data)
    assert info.value.retriable
    assert_nothing_left(big)


@pytest.mark.parametrize(
    ("operation", "status", "code", "error"),
    [
        ("CompleteMultipartUpload", 500, "InternalError", RemoteStorageUnavailableError),
        ("PutObject", 503, "SlowDown", RemoteStorageUnavailableError),
        ("PutObject", 403, "AccessDenied", RemoteStorageError),
        ("CreateMultipartUpload", 403, "AccessDenied", RemoteStorageError),
    ],
)
def test_persistent_failures_clean_up(
    big: Backend,
    tmp_path: Path,
    operation: str,
    status: int,
    code: str,
    error: type[RemoteStorageError],
) -> None:
    def snapshot_only(request: AWSRequest) -> AWSResponse | None:
        # PutObject: fail only the .snapshot, so the other PUTs and the parts succeed.
        if operation == "PutObject" and ".snapshot" not in str(request.url):
            return None
        return xml_response(request, status, error_xml(code))

    register(big, operation, failing(-1, snapshot_only)[0])
    with pytest.raises(error, match=code) as info:
        big.rsm.copy_log_segment_data(make_metadata(), write_segment(tmp_path / "l", 12 * MiB).data)
    assert info.value.retriable == (status >= 500)
    assert_nothing_left(big)


def test_small_segment_put_failure_cleans_up(s3_server_factory: S3Factory, tmp_path: Path) -> None:
    b = s3_server_factory(max_attempts=2, copy_retry_s=0)
    hook, count = failing(-1, lambda r: xml_response(r, 500, error_xml("InternalError")))

    def txn_only(request: AWSRequest, **kw: Any) -> AWSResponse | None:
        return hook(request, **kw) if ".txnindex" in str(request.url) else None

    register(b, "PutObject", txn_only)
    with pytest.raises(RemoteStorageUnavailableError, match=r"\.txnindex"):
        b.rsm.copy_log_segment_data(make_metadata(), write_segment(tmp_path / "l").data)
    assert count == [2]  # max_attempts
    assert_nothing_left(b)


def test_failed_part_stops_queued_work(s3_server_factory: S3Factory, tmp_path: Path) -> None:
    # Two workers: parts are queued first, part 1 is refused, and the parts and PUTs still
    # queued behind it must be skipped, the error being part 1's, not "aborted".
    b = s3_server_factory(max_attempts=1, max_concurrency=2, **MULTIPART)
    sent: list[str] = []

    def deny_part_one(request: AWSRequest, **_: Any) -> AWSResponse | None:
        sent.append(str(request.url))
        if "partNumber=1&" in str(request.url) or str(request.url).endswith("partNumber=1"):
            return xml_response(request, 403, "<Error><Code>AccessDenied</Code></Error>")
        return None

    register(b, "UploadPart", deny_part_one)
    register(b, "PutObject", lambda request, **_: sent.append(str(request.url)))
    with pytest.raises(RemoteStorageError, match=r"AccessDenied.*\.log|\.log.*AccessDenied"):
        b.rsm.copy_log_segment_data(make_metadata(), write_segment(tmp_path / "l", 16 * MiB).data)
    assert len(sent) <= 2, sent  # parts 1 and 2 ran together; nothing after them
    assert_nothing_left(b)


def only_for(marker: str, hook: Hook) -> Hook:
    """``hook`` for the requests whose URL holds ``marker``; the others pass."""

    def filtered(request: AWSRequest, **kw: Any) -> AWSResponse | None:
        return hook(request, **kw) if marker in str(request.url) else None

    return filtered


def _sent(b: Backend) -> list[tuple[str, str]]:
    """Every PUT and part request the backend sends from now on, as (operation, url)."""
    sent: list[tuple[str, str]] = []
    lock = threading.Lock()

    def record(request: AWSRequest, event_name: str, **_: Any) -> None:
        with lock:
            sent.append((event_name.rsplit(".", 1)[-1], str(request.url)))

    for operation in ("PutObject", "UploadPart", "CompleteMultipartUpload"):
        # Registered first: it sees every request, the ones a later hook fails too.
        b.rsm.client.meta.events.register_first(f"before-send.s3.{operation}", record)  # type: ignore[attr-defined]
    return sent


def test_a_copy_tries_a_refused_object_again_and_uploads_nothing_twice(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    # The client gives up on the time index after 2 attempts, twice over: the copy tries
    # that PUT again, and the parts and other objects that landed are not sent again.
    b = s3_server_factory(
        max_attempts=2, max_concurrency=3, retry_mode="standard", copy_retry_s=10, **MULTIPART
    )
    sent = _sent(b)
    hook, count = failing(4, lambda r: xml_response(r, 503, error_xml("SlowDown")))
    register(
        b,
        "PutObject",
        only_for(".timeindex", hook),
    )
    seg = write_segment(tmp_path / "l", 12 * MiB)
    metadata = make_metadata()
    started = time.monotonic()
    b.rsm.copy_log_segment_data(metadata, seg.data)
    assert count == [4]
    assert time.monotonic() - started >= 0.5  # one wait of the copy's own, at least
    time_index = [u for op, u in sent if op == "PutObject" and ".timeindex" in u]
    assert len(time_index) == 5  # 2 + 2 refused, the fifth stored
    others = [u for op, u in sent if ".timeindex" not in u]
    assert len(others) == len(set(others)), "an object or part was sent twice"
    assert sum(op == "UploadPart" for op, _ in sent) == 3  # 12 MiB in 5 MiB parts
    assert b.open_uploads() == []
    assert b.rsm.fetch_index(metadata, IndexType.TIMESTAMP) == seg.contents["time_index"]
    with b.rsm.fetch_log_segment(metadata, 0) as stream:
        assert stream.read() == seg.contents["log_segment"]


def test_a_part_refused_past_the_clients_retries_is_sent_again_alone(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    b = s3_server_factory(
        max_attempts=1, max_concurrency=3, retry_mode="standard", copy_retry_s=10, **MULTIPART
    )
    sent = _sent(b)
    hook, _ = failing(2, lambda r: xml_response(r, 500, error_xml("InternalError")))
    register(
        b,
        "UploadPart",
        only_for("partNumber=2", hook),
    )
    seg = write_segment(tmp_path / "l", 12 * MiB)
    metadata = make_metadata()
    b.rsm.copy_log_segment_data(metadata, seg.data)
    parts = [u for op, u in sent if op == "UploadPart"]
    assert sum("partNumber=2" in u for u in parts) == 3 and len(parts) == 5
    with b.rsm.fetch_log_segment(metadata, 0) as stream:
        assert stream.read() == seg.contents["log_segment"]


def test_a_copy_gives_up_after_its_retry_time_and_cleans_up(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    b = s3_server_factory(max_attempts=1, retry_mode="standard", copy_retry_s=1.6, **MULTIPART)
    hook, count = failing(-1, lambda r: xml_response(r, 503, error_xml("SlowDown")))
    register(
        b,
        "PutObject",
        only_for(".snapshot", hook),
    )
    started = time.monotonic()
    with pytest.raises(RemoteStorageUnavailableError, match=r"\.snapshot") as info:
        b.rsm.copy_log_segment_data(make_metadata(), write_segment(tmp_path / "l", 12 * MiB).data)
    assert info.value.retriable
    assert 0.5 <= time.monotonic() - started < 10
    # Tried at once, after the store's pause of 0.5 s and (when that try answered within
    # 0.1 s) after its next of 1 s; no try starts past the 1.6 s, so never a fourth.
    assert count[0] in (2, 3)
    assert_nothing_left(b)


def test_closing_the_store_ends_a_copy_waiting_to_try_again(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    b = s3_server_factory(max_attempts=1, retry_mode="standard", copy_retry_s=600, **MULTIPART)
    hook, count = failing(-1, lambda r: xml_response(r, 503, error_xml("SlowDown")))
    register(
        b,
        "PutObject",
        only_for(".snapshot", hook),
    )
    data = write_segment(tmp_path / "l", 12 * MiB).data
    thread, outcome = _copy_in_thread(b, make_metadata(), data, None)
    deadline = time.monotonic() + 30
    while count[0] < 2 and time.monotonic() < deadline:  # refused, waited, refused again
        time.sleep(0.05)
    assert count[0] >= 2
    closing = time.monotonic()
    b.rsm.close()
    thread.join(10)
    assert not thread.is_alive()
    assert time.monotonic() - closing < 5  # not the 600 s the copy had left
    assert len(outcome) == 1 and isinstance(outcome[0], RemoteStorageUnavailableError)
    assert_nothing_left(s3_server_factory())  # the copy cleaned up before the client closed


def test_while_s3_refuses_the_stores_copies_send_nothing_until_a_probe_is_answered(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    # One copy's refused PUT pauses the store: neither that copy nor one started during
    # the pause sends a request while the one-attempt HeadBucket probes are refused.
    # Once S3 answers, both complete, every object sent once but the refused one.
    b = s3_server_factory(
        max_attempts=1, max_concurrency=3, retry_mode="standard", copy_retry_s=30, **MULTIPART
    )
    sent = _sent(b)
    refusing = threading.Event()
    refusing.set()
    probes = [0]
    refused = "00000000000000001000-"  # the first copy's snapshot, below

    def refuse(request: AWSRequest, event_name: str, **_: Any) -> AWSResponse | None:
        if event_name.endswith("HeadBucket"):
            probes[0] += 1
        elif refused not in str(request.url) or not str(request.url).endswith(".snapshot"):
            return None
        return xml_response(request, 503, error_xml("SlowDown")) if refusing.is_set() else None

    first, second = make_metadata(start_offset=1000), make_metadata(start_offset=2000)
    register(b, "PutObject", refuse)
    b.rsm.probe_client.meta.events.register("before-send.s3.HeadBucket", refuse)  # type: ignore[attr-defined]
    errors: list[BaseException] = []

    def copy(metadata: RemoteLogSegmentMetadata, seed: int) -> threading.Thread:
        data = write_segment(tmp_path / str(seed), 6 * MiB, seed=seed).data

        def run() -> None:
            try:
                b.rsm.copy_log_segment_data(metadata, data)
            except BaseException as e:
                errors.append(e)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    threads = [copy(first, 1)]
    deadline = time.monotonic() + 20
    while b.rsm.paused_for_s() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.rsm.paused_for_s() > 0
    time.sleep(0.3)  # the first copy's other requests, sent before the pause, settle
    before = len(sent)
    threads.append(copy(second, 2))
    while probes[0] < 2 and time.monotonic() < deadline:  # 0.5 s, then 1 s more
        time.sleep(0.05)
    assert probes[0] >= 2 and sent[before:] == [], "a request went out during the pause"
    refusing.clear()
    for thread in threads:
        thread.join(30)
    assert errors == [] and not any(t.is_alive() for t in threads)
    snapshot = [u for _, u in sent if refused in u and u.endswith(".snapshot")]
    others = [u for _, u in sent if u not in snapshot]
    assert len(others) == len(set(others)), "an object or part was sent twice"
    assert len(snapshot) == 2  # refused once, then stored
    for metadata in (first, second):
        assert b.rsm.fetch_index(metadata, IndexType.TIMESTAMP)


class Outage:
    """S3 refusing ``.snapshot`` PUTs and the pause's probes while ``on`` is set."""

    def __init__(self, b: Backend) -> None:
        self.on = threading.Event()
        self.on.set()
        self.probes = 0
        register(b, "PutObject", self._refuse)
        b.rsm.probe_client.meta.events.register("before-send.s3.HeadBucket", self._refuse)  # type: ignore[attr-defined]

    def _refuse(self, request: AWSRequest, event_name: str, **_: Any) -> AWSResponse | None:
        if event_name.endswith("HeadBucket"):
            self.probes += 1
        elif not str(request.url).endswith(".snapshot"):
            return None
        return xml_response(request, 503, error_xml("SlowDown")) if self.on.is_set() else None


def _copy_in_thread(
    b: Backend, metadata: RemoteLogSegmentMetadata, data: Any, cancelled: threading.Event | None
) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            b.rsm.copy_log_segment_data(metadata, data, cancelled=cancelled)
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def cancel_and_check(
    b: Backend,
    thread: threading.Thread,
    errors: list[BaseException],
    cancelled: threading.Event,
    join_s: float,
) -> None:
    """Cancel the copy still running in ``thread``: it ends within ``join_s`` with one
    error that says it was cancelled (not that another object failed), and leaves
    nothing in the bucket."""
    assert thread.is_alive() and errors == []
    cancelled.set()
    thread.join(join_s)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], RemoteStorageError)
    assert "cancelled" in str(errors[0]) and "another object" not in str(errors[0]), errors
    assert_nothing_left(b)


@pytest.mark.parametrize("cancellable", [True, False])
def test_a_copy_its_caller_can_cancel_waits_out_an_outage_longer_than_its_retry_time(
    s3_server_factory: S3Factory, tmp_path: Path, cancellable: bool
) -> None:
    # S3 refuses even the probes for ~3 s, three times copy_retry_s. A copy given a
    # cancel event does not count the outage and completes once S3 answers; one without
    # (rlmm serve's: Kafka cannot cancel it) fails at its budget, as before.
    b = s3_server_factory(max_attempts=1, retry_mode="standard", copy_retry_s=1.0, **MULTIPART)
    outage = Outage(b)
    metadata = make_metadata()
    seg = write_segment(tmp_path / "l", 6 * MiB)
    thread, errors = _copy_in_thread(
        b, metadata, seg.data, threading.Event() if cancellable else None
    )
    thread.join(3.0)  # the outage; its budget would end it after 1 s
    assert outage.probes >= 1
    outage.on.clear()
    thread.join(30)
    assert not thread.is_alive()
    if cancellable:
        assert errors == []
        assert b.rsm.fetch_index(metadata, IndexType.TIMESTAMP) == seg.contents["time_index"]
    else:
        assert len(errors) == 1 and isinstance(errors[0], RemoteStorageUnavailableError)
        assert_nothing_left(b)


def test_a_cancelled_copy_stops_waiting_for_s3_and_cleans_up(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    b = s3_server_factory(max_attempts=1, retry_mode="standard", copy_retry_s=1.0, **MULTIPART)
    outage = Outage(b)
    cancelled = threading.Event()
    thread, errors = _copy_in_thread(
        b, make_metadata(), write_segment(tmp_path / "l", 6 * MiB).data, cancelled
    )
    deadline = time.monotonic() + 20
    while outage.probes < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # past copy_retry_s: still waiting, the outage not counted
    cancel_and_check(b, thread, errors, cancelled, join_s=5)


def test_a_copy_cancelled_while_its_parts_are_in_flight_says_it_was_cancelled(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    # The parts of the .log are on the wire when the caller gives the copy up, and S3
    # then refuses them. The copy's error says it was cancelled: it used to give S3's
    # refusal as the cause, or, when the parts stopped waiting in the store's pause
    # (as on a loaded machine), "another object failed", naming no object.
    b = s3_server_factory(max_attempts=1, retry_mode="standard", copy_retry_s=1.0, **MULTIPART)
    cancelled = threading.Event()

    def part(request: AWSRequest, **_: Any) -> AWSResponse | None:
        cancelled.wait(20)
        return xml_response(request, 503, error_xml("SlowDown"))

    register(b, "UploadPart", part)
    thread, errors = _copy_in_thread(
        b, make_metadata(), write_segment(tmp_path / "l", 6 * MiB).data, cancelled
    )
    time.sleep(1.0)  # the parts are sent and wait for their answer
    cancel_and_check(b, thread, errors, cancelled, join_s=10)


def test_a_cancellable_copy_s3_refuses_alone_still_gives_up_at_its_retry_time(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    # S3 answers the probes and the other objects, and refuses this copy's snapshot:
    # no outage, so the pauses its refusals began count, and it fails at copy_retry_s.
    b = s3_server_factory(max_attempts=1, retry_mode="standard", copy_retry_s=1.0, **MULTIPART)
    hook, count = failing(-1, lambda r: xml_response(r, 503, error_xml("SlowDown")))
    register(b, "PutObject", only_for(".snapshot", hook))
    started = time.monotonic()
    thread, errors = _copy_in_thread(
        b, make_metadata(), write_segment(tmp_path / "l", 6 * MiB).data, threading.Event()
    )
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - started < 10
    assert len(errors) == 1 and isinstance(errors[0], RemoteStorageUnavailableError)
    assert ".snapshot" in str(errors[0])
    assert count[0] >= 2
    assert_nothing_left(b)


def test_the_head_after_a_write_once_refusal_is_tried_again_like_the_put(
    s3_server_factory: S3Factory, tmp_path: Path
) -> None:
    # A copy that finds its objects already there (a retry whose first try landed) asks
    # HEAD whether they are identical: S3 refusing that HEAD pauses and tries again, as a
    # refused PUT does, instead of failing a copy whose objects are all stored.
    b = s3_server_factory(max_attempts=1, retry_mode="standard", copy_retry_s=10, **MULTIPART)
    metadata, seg = make_metadata(), write_segment(tmp_path / "l", 1 * MiB)
    b.rsm.copy_log_segment_data(metadata, seg.data)
    hook, count = failing(1, lambda r: xml_response(r, 503, error_xml("SlowDown")))
    register(b, "HeadObject", hook)
    b.rsm.copy_log_segment_data(metadata, seg.data)
    assert count == [1]
    assert b.rsm.fetch_index(metadata, IndexType.TIMESTAMP) == seg.contents["time_index"]
