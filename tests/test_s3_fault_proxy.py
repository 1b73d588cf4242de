"""The soak's S3 fault proxy: transparent at rate 0, and each fault does what it says.

Invariant checked: through the proxy boto3 stores and reads objects exactly as on moto
itself (PUT, GET, HEAD, LIST, DELETE, a multipart upload); at rate 1 each kind of fault
reaches the client as S3 would show it (a 500, a 503 SlowDown, a dropped connection),
and ``lost`` carries the request out before dropping the answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import botocore.config
import botocore.exceptions
import pytest

from tests.fixtures.s3_faults import KINDS, FaultyS3, faulty_s3

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultyS3]:
    with faulty_s3(tmp_path_factory.mktemp("faults"), seed=7) as s3:
        yield s3


def client(url: str, attempts: int = 1):  # type: ignore[no-untyped-def]
    config = botocore.config.Config(
        retries={"mode": "standard", "total_max_attempts": attempts}, read_timeout=5,
        connect_timeout=2,
    )  # fmt: skip
    return boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
        aws_secret_access_key="testing", config=config,
    )  # fmt: skip


def test_transparent_at_rate_zero(s3: FaultyS3) -> None:
    s3.faults(rate=0)
    c = client(s3.url)
    c.create_bucket(Bucket="plain")
    body = bytes(range(256)) * 4096
    c.put_object(Bucket="plain", Key="a/b.log", Body=body)
    assert c.get_object(Bucket="plain", Key="a/b.log")["Body"].read() == body
    assert c.head_object(Bucket="plain", Key="a/b.log")["ContentLength"] == len(body)
    ranged = c.get_object(Bucket="plain", Key="a/b.log", Range="bytes=10-19")["Body"].read()
    assert ranged == body[10:20]
    up = c.create_multipart_upload(Bucket="plain", Key="big")
    part = c.upload_part(Bucket="plain", Key="big", UploadId=up["UploadId"], PartNumber=1,
                         Body=b"x" * (5 << 20))  # fmt: skip
    c.complete_multipart_upload(
        Bucket="plain", Key="big", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
    )  # fmt: skip
    names = [o["Key"] for o in c.list_objects_v2(Bucket="plain")["Contents"]]
    assert names == ["a/b.log", "big"]
    c.delete_object(Bucket="plain", Key="a/b.log")
    assert [o["Key"] for o in c.list_objects_v2(Bucket="plain")["Contents"]] == ["big"]
    assert s3.faults()["counts"] == dict.fromkeys(KINDS, 0)


@pytest.mark.parametrize(
    ("weights", "expected"),
    [("error", "InternalError"), ("throttle", "SlowDown"), ("drop", "Connection")],
)
def test_each_fault_reaches_the_client(tmp_path: Path, weights: str, expected: str) -> None:
    only = ",".join(
        f"{k}={int(k == weights)}" for k in ("error", "throttle", "slow", "drop", "lost")
    )
    with faulty_s3(tmp_path, rate=1.0, weights=only) as s3:
        client(s3.moto_url).create_bucket(Bucket="faulty")
        with pytest.raises(
            (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)
        ) as e:
            client(s3.url).put_object(Bucket="faulty", Key="k", Body=b"v")
        assert expected in str(e.value) or expected in type(e.value).__name__, repr(e.value)
        assert "Contents" not in client(s3.moto_url).list_objects_v2(Bucket="faulty")
        assert s3.faults()["counts"][weights] == 1


def test_lost_answer_after_the_request_was_carried_out(tmp_path: Path) -> None:
    only = "error=0,throttle=0,slow=0,drop=0,lost=1"
    with faulty_s3(tmp_path, rate=1.0, weights=only) as s3:
        client(s3.moto_url).create_bucket(Bucket="faulty")
        with pytest.raises(botocore.exceptions.BotoCoreError):
            client(s3.url).put_object(Bucket="faulty", Key="k", Body=b"v")
        got = client(s3.moto_url).get_object(Bucket="faulty", Key="k")["Body"].read()
        assert got == b"v"  # stored, though the client saw a failure


def test_slow_answers_arrive_late_but_whole(tmp_path: Path) -> None:
    import time

    only = "error=0,throttle=0,slow=1,drop=0,lost=0"
    with faulty_s3(tmp_path, rate=1.0, weights=only, slow_s=0.8) as s3:
        client(s3.moto_url).create_bucket(Bucket="faulty")
        start = time.monotonic()
        client(s3.url).put_object(Bucket="faulty", Key="k", Body=b"v")
        assert time.monotonic() - start >= 0.2
        assert client(s3.moto_url).get_object(Bucket="faulty", Key="k")["Body"].read() == b"v"


def test_put_bodies_are_counted_refused_ones_too(tmp_path: Path) -> None:
    # The soak's "bytes sent to S3": every log segment byte a client sent, whether S3
    # stored it or the proxy refused it; other objects apart.
    with faulty_s3(tmp_path, seed=3) as s3:
        c = client(s3.url)
        c.create_bucket(Bucket="counted")
        c.put_object(Bucket="counted", Key="t-0/1.log", Body=b"l" * 1000)
        c.put_object(Bucket="counted", Key="t-0/1.index", Body=b"i" * 300)
        up = c.create_multipart_upload(Bucket="counted", Key="t-0/2.log")
        c.upload_part(Bucket="counted", Key="t-0/2.log", UploadId=up["UploadId"],
                      PartNumber=1, Body=b"p" * (5 << 20))  # fmt: skip
        s3.faults(rate=1, error=1, throttle=0, slow=0, drop=0, lost=0)
        with pytest.raises(botocore.exceptions.ClientError, match="InternalError"):
            c.put_object(Bucket="counted", Key="t-0/3.log", Body=b"r" * 2000)
        sent = s3.faults(rate=0)["put_bytes"]
    # aws-chunked framing and trailing checksums add a few bytes per request
    assert 1000 + (5 << 20) + 2000 <= sent["log"] <= 1000 + (5 << 20) + 2000 + 1024, sent
    assert 300 <= sent["other"] <= 300 + 512, sent
