"""AivenS3Layout: reads of Aiven's chunked, compressed and encrypted objects, and every
way they can be broken, each a one-line error naming the object key.

The objects come from aiven_objects.py (real Kafka segment files, laid out in the
plugin's format); test_aiven_plugin_data.py reads objects the plugin itself wrote.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote import IndexType, RemoteIntegrityError, RemoteResourceNotFoundError
from remote.errors import InvalidRemotePathError, MissingKeyMaterialError
from remote.layouts._aiven_manifest import (
    ChunkIndex,
    decode_chunk_sizes,
    decode_custom_metadata,
    parse_manifest,
)
from remote.layouts.aiven_s3 import AivenS3Layout
from remote.registry import load_remote_layout
from remote.segments.batch import RecordBatchReader
from rlmm.errors import ConfigError
from tests.remote.layouts.aiven_objects import (
    Written,
    encode_chunk_sizes,
    real_segment,
    rsa_key_pair,
    write_aiven,
)

BUCKET = "kafka-tiered"
PREFIX = "tiered/"


@pytest.fixture
def s3(mock_s3: None) -> Any:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def segment(tmp_path: Path) -> tuple[Any, bytes, dict[IndexType, bytes]]:
    return real_segment(tmp_path)


def layout(**options: Any) -> AivenS3Layout:
    built = load_remote_layout(
        {"type": "aiven-s3", "bucket": BUCKET, "key.prefix": PREFIX, **options}
    )
    assert isinstance(built, AivenS3Layout)
    return built


@pytest.fixture
def reader(s3: Any) -> Iterator[AivenS3Layout]:
    built = layout()
    yield built
    built.close()
    built.close()  # idempotent


# --- the manifest codec ------------------------------------------------------------------


@given(st.lists(st.integers(0, 2**31 - 1), max_size=300))
def test_chunk_sizes_round_trip(values: list[int]) -> None:
    assert list(decode_chunk_sizes(encode_chunk_sizes(values))) == values


@settings(max_examples=200)
@given(
    chunk=st.integers(1, 5000),
    size=st.integers(0, 60_000),
    data=st.data(),
)
def test_chunks_for_a_range_cover_it_exactly(chunk: int, size: int, data: st.DataObject) -> None:
    count = -(-size // chunk)
    index = ChunkIndex(chunk, size, tuple(range(10, 10 + count)))
    if size == 0:
        assert len(index.chunks_for_range(0, 10)) == 0
        return
    first = data.draw(st.integers(0, size - 1))
    last = data.draw(st.integers(first, size + 100))
    chunks = index.chunks_for_range(first, last)
    assert (
        chunks[0].original_position <= first < chunks[0].original_position + chunks[0].original_size
    )
    end = min(last, size - 1)
    assert (
        chunks[-1].original_position
        <= end
        < chunks[-1].original_position + chunks[-1].original_size
    )
    for a, b in itertools.pairwise(chunks):
        assert b.original_position == a.original_position + a.original_size
        assert b.transformed_position == a.transformed_position + a.transformed_size


def test_manifest_shapes_are_checked() -> None:
    good = {
        "version": "1",
        "chunkIndex": {"type": "fixed", "originalChunkSize": 10, "originalFileSize": 25,
                       "transformedChunkSize": 10, "finalTransformedChunkSize": 5},
        "segmentIndexes": {name: {"position": 0, "size": 0}
                           for name in ("offset", "timestamp", "producerSnapshot", "leaderEpoch")},
        "compression": False,
    }  # fmt: skip
    manifest = parse_manifest(json.dumps(good).encode())
    index = manifest.chunk_index
    assert [index.chunk(i).transformed_size for i in range(index.chunk_count)] == [10, 10, 5]
    assert manifest.indexes[IndexType.TRANSACTION] is None and manifest.log_stored_as_is
    for broken, message in [
        (b"{not json", "not JSON"),
        (json.dumps({**good, "version": "2"}).encode(), "version"),
        (json.dumps({**good, "chunkIndex": {**good["chunkIndex"], "type": "x"}}).encode(), "type"),
        (json.dumps({**good, "segmentIndexes": {}}).encode(), "segmentIndexes.offset"),
        (json.dumps({**good, "compression": "yes"}).encode(), "compression"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_manifest(broken)


def test_custom_metadata_fields() -> None:
    # Kafka tagged fields: count, then (tag, size, data): remote size (zigzag varlong 300),
    # object prefix "p/" and object key "k" as compact strings.
    data = bytes([3, 0, 2, 0xD8, 0x04, 1, 3, 3]) + b"p/" + bytes([2, 2, 2]) + b"k"
    assert decode_custom_metadata(data) == {0: 300, 1: "p/", 2: "k"}
    assert decode_custom_metadata(b"") == {}


# --- reading -----------------------------------------------------------------------------


def read_all(reader: AivenS3Layout, w: Written, start: int = 0, end: int | None = None) -> bytes:
    with reader.fetch_log_segment(w.metadata, start, end) as f:
        return f.read()


@pytest.mark.parametrize("compression", [True, False])
def test_ranges_and_indexes(
    s3: Any, reader: AivenS3Layout, segment: Any, compression: bool
) -> None:
    metadata, log, indexes = segment
    w = write_aiven(s3, BUCKET, PREFIX, metadata, log, indexes, compression=compression)
    assert read_all(reader, w) == log
    assert next(b.base_offset for b in RecordBatchReader(read_all(reader, w))) == 0
    for start, end in [(0, 0), (4095, 4096), (4096, 8191), (5000, 20_000), (len(log) - 1, None),
                       (len(log) - 10, 10**9), (123, 124)]:  # fmt: skip
        stop = len(log) if end is None else min(end + 1, len(log))
        assert read_all(reader, w, start, end) == log[start:stop], (start, end)
    for kind, data in indexes.items():
        assert reader.fetch_index(w.metadata, kind) == data
    with pytest.raises(RemoteResourceNotFoundError, match=r"TRANSACTION index .* records none"):
        reader.fetch_index(w.metadata, IndexType.TRANSACTION)
    objects = {o.label: o for o in reader.segment_objects(w.metadata)}
    stored = {o.name: o.size for o in reader.list_objects(w.metadata.topic_id_partition)}
    assert objects["log segment"].recorded_size == stored[objects["log segment"].name]
    assert objects["indexes"].recorded_size == stored[objects["indexes"].name]
    assert objects["log segment"].holds_log is not compression
    assert all(reader.parse_object_name(name) for name in stored)


def test_encrypted_segments_need_their_private_key(s3: Any, segment: Any, tmp_path: Path) -> None:
    metadata, log, indexes = segment
    private, public = rsa_key_pair(tmp_path, "k1")
    w = write_aiven(s3, BUCKET, PREFIX, metadata, log, indexes, encryption=("k1", public))
    with layout(**{"encryption.key.pairs.k1.private.key.file": str(private)}) as keyed:
        assert read_all(keyed, w, 100, 9000) == log[100:9001]  # type: ignore[arg-type]
        assert keyed.fetch_index(w.metadata, IndexType.OFFSET) == indexes[IndexType.OFFSET]  # type: ignore[attr-defined]
    with layout() as keyless, pytest.raises(MissingKeyMaterialError) as e:
        read_all(keyless, w)  # type: ignore[arg-type]
    assert "set remote.encryption.key.pairs.k1.private.key.file" in str(e.value)
    assert w.keys["rsm-manifest"] in str(e.value) and "\n" not in str(e.value)
    other, _ = rsa_key_pair(tmp_path, "k2")
    wrong = layout(**{"encryption.key.pairs.k1.private.key.file": str(other)})
    with wrong, pytest.raises(RemoteIntegrityError, match="cannot unwrap the data key"):
        read_all(wrong, w)


# --- bad input: one line naming the key ---------------------------------------------------


def one_line(e: BaseException, key: str) -> str:
    text = str(e)
    assert "\n" not in text and key in text, text
    return text


def test_a_manifest_that_is_not_json(s3: Any, reader: AivenS3Layout, segment: Any) -> None:
    w = write_aiven(s3, BUCKET, PREFIX, *segment)
    s3.put_object(Bucket=BUCKET, Key=w.keys["rsm-manifest"], Body=b"<html>oops</html>")
    with pytest.raises(RemoteIntegrityError) as e:
        read_all(reader, w)
    assert "not JSON" in one_line(e.value, w.keys["rsm-manifest"])
    assert e.value.object_name == w.keys["rsm-manifest"].removeprefix(PREFIX)


def test_a_chunk_index_that_does_not_match_the_object(
    s3: Any, reader: AivenS3Layout, segment: Any
) -> None:
    w = write_aiven(s3, BUCKET, PREFIX, *segment)
    stored = s3.get_object(Bucket=BUCKET, Key=w.keys["log"])["Body"].read()
    s3.put_object(Bucket=BUCKET, Key=w.keys["log"], Body=stored[:-100])
    with pytest.raises(RemoteIntegrityError) as e:
        read_all(reader, w, 0, 100)
    assert "chunk index" in one_line(e.value, w.keys["log"])


def test_a_truncated_or_garbled_chunk(s3: Any, reader: AivenS3Layout, segment: Any) -> None:
    w = write_aiven(s3, BUCKET, PREFIX, *segment)
    stored = bytearray(s3.get_object(Bucket=BUCKET, Key=w.keys["log"])["Body"].read())
    stored[30:40] = b"\xff" * 10  # inside the first zstd frame
    s3.put_object(Bucket=BUCKET, Key=w.keys["log"], Body=bytes(stored))
    with pytest.raises(RemoteIntegrityError) as e:
        read_all(reader, w)
    assert "chunk 0" in one_line(e.value, w.keys["log"])


def test_a_missing_indexes_object(s3: Any, reader: AivenS3Layout, segment: Any) -> None:
    w = write_aiven(s3, BUCKET, PREFIX, *segment)
    s3.delete_object(Bucket=BUCKET, Key=w.keys["indexes"])
    with pytest.raises(RemoteResourceNotFoundError) as e:
        reader.fetch_index(w.metadata, IndexType.OFFSET)
    one_line(e.value, w.keys["indexes"])


def test_a_bucket_in_rlmms_layout(s3: Any, segment: Any, tmp_path: Path) -> None:
    from remote import LogSegmentData
    from remote.s3 import S3RemoteStorageManager

    metadata, log, indexes = segment
    files = {}
    for kind, data in indexes.items():
        files[kind] = tmp_path / f"i{int(kind)}"
        files[kind].write_bytes(data)
    (tmp_path / "x.log").write_bytes(log)
    with S3RemoteStorageManager(BUCKET, "tiered") as ours:
        ours.copy_log_segment_data(
            metadata,
            LogSegmentData(
                tmp_path / "x.log",
                files[IndexType.OFFSET],
                files[IndexType.TIMESTAMP],
                None,
                files[IndexType.PRODUCER_SNAPSHOT],
                indexes[IndexType.LEADER_EPOCH],
            ),
        )
    with layout() as aiven, pytest.raises(ConfigError) as e:
        aiven.fetch_log_segment(metadata, 0)  # type: ignore[attr-defined]
    assert "in the local or s3 layout" in str(e.value) and "\n" not in str(e.value)


def test_settings_and_deletes(s3: Any, reader: AivenS3Layout, segment: Any) -> None:
    with pytest.raises(ConfigError, match=r"unknown setting remote\.chunk_sise"):
        layout(chunk_sise=1)
    with pytest.raises(ConfigError, match=r"needs remote\.bucket"):
        load_remote_layout({"type": "aiven-s3"})
    # The brokers' rsm.config.* pasted as they are: writer-only settings are accepted.
    pasted = load_remote_layout({
        "type": "aiven-s3", "storage.s3.bucket.name": BUCKET, "key.prefix": PREFIX,
        "chunk.size": "4194304", "compression.enabled": "true",
        "storage.backend.class": "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
        "storage.s3.path.style.access.enabled": "true",
    })  # fmt: skip
    pasted.close()
    w = write_aiven(s3, BUCKET, PREFIX, *segment)
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}README", Body=b"not ours")
    with pytest.raises(InvalidRemotePathError, match="README"):
        reader.delete_objects(["README"])
    reader.delete_segment_objects(w.metadata)
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert left == [f"{PREFIX}README"]


def test_aivens_objects_read_as_rlmms_layout(s3: Any, segment: Any) -> None:
    """The other way round: remote.type = 's3' over the plugin's bucket names the layout."""
    w = write_aiven(s3, BUCKET, PREFIX, *segment)
    ours = load_remote_layout({"type": "s3", "bucket": BUCKET, "prefix": PREFIX})
    with ours, pytest.raises(ConfigError) as e:
        ours.fetch_log_segment(w.metadata, 0)
    text = str(e.value)
    assert "rsm-manifest is in the aiven-s3 layout" in text and "\n" not in text
