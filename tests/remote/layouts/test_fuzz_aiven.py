"""Fuzzing Aiven's manifest, chunk index, custom metadata and chunk de-transform under a
1 GiB address-space cap (issue 31): every input, a structure-aware mutation of what
Aiven's plugin really wrote (tests/data/aiven-tiered), ends in a parse or a
CorruptObjectError naming the field, within a second; and the regression of the issue
(a fixed chunk index of 2**63 bytes) is refused at once.
"""

from __future__ import annotations

import base64
import functools
import json
import random
import resource
import subprocess
import sys
from pathlib import Path

import cramjam
import pytest
import zstandard

from remote.errors import CorruptObjectError
from remote.layouts._aiven_manifest import (
    Chunk,
    ChunkIndex,
    decode_chunk_sizes,
    decode_custom_metadata,
    parse_manifest,
)
from remote.layouts._aiven_transforms import (
    MAX_CHUNK_BYTES,
    detransform_chunk,
    unwrap_data_key,
)
from tests.fuzzing import (
    DATA,
    ROOT,
    assert_clean,
    interesting_int,
    mutate_bytes,
    mutate_json,
    put_int,
    run_fuzz,
)

AIVEN = DATA / "aiven-tiered"
CORRUPT = ["remote.errors.CorruptObjectError"]
HERE = "tests.remote.layouts.test_fuzz_aiven"


@functools.cache
def manifests() -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in sorted(AIVEN.glob("*/bucket/**/*.rsm-manifest"))]


@functools.cache
def chunk_size_codecs() -> list[bytes]:
    """The raw (decompressed) variable chunk indexes the plugin wrote."""
    out = []
    for _, data in manifests():
        index = json.loads(data)["chunkIndex"]
        if index["type"] == "variable":
            packed = base64.b64decode(index["transformedChunks"])
            out.append(bytes(cramjam.zstd.decompress(packed)))
    return out


@functools.cache
def data_key(variant: str) -> bytes | None:
    pem = AIVEN / variant / "key1-private.pem"
    if not pem.exists():
        return None
    manifest = json.loads(manifests_of(variant)[0][1])
    wrapped = base64.b64decode(manifest["encryption"]["dataKey"].split(":")[1])
    return unwrap_data_key(wrapped, pem.read_bytes())


def manifests_of(variant: str) -> list[tuple[Path, bytes]]:
    return [(p, d) for p, d in manifests() if p.relative_to(AIVEN).parts[0] == variant]


@functools.cache
def chunks() -> list[tuple[bytes, Chunk, bool, bytes | None, bytes | None]]:
    """(stored bytes, chunk, compression, data key, aad) of real chunks of every variant."""
    out = []
    for path, data in manifests():
        variant = path.relative_to(AIVEN).parts[0]
        manifest = parse_manifest(data)
        log = path.with_name(path.name.removesuffix(".rsm-manifest") + ".log").read_bytes()
        key = data_key(variant) if manifest.encryption else None
        aad = manifest.encryption.aad if manifest.encryption else None
        index = manifest.chunk_index
        for chunk in index.chunks_for_range(0, index.original_file_size):
            at = chunk.transformed_position
            stored = log[at : at + chunk.transformed_size]
            out.append((stored, chunk, manifest.compression, key, aad))
    return out


def zstd_frame(rng: random.Random, content: bytes) -> bytes:
    """``content`` as one zstd frame, with or without its declared size."""
    if rng.random() < 0.5:
        return bytes(cramjam.zstd.compress(content))
    return zstandard.ZstdCompressor(write_content_size=False).compress(content)


@functools.cache
def bomb(size: int, declared: bool) -> bytes:
    """A zstd frame of ``size`` zero bytes made of RLE blocks (4 bytes per 128 KiB, so
    32 KiB for a GiB), declaring its size or not."""
    block = 128 * 1024
    header = b"\x28\xb5\x2f\xfd" + (
        bytes([0xC0, 0x38]) + size.to_bytes(8, "little") if declared else bytes([0x00, 0x38])
    )
    blocks = bytearray()
    left = size
    while True:
        n = min(block, left)
        left -= n
        blocks += ((n << 3) | (1 << 1) | (0 if left else 1)).to_bytes(3, "little") + b"\x00"
        if not left:
            return bytes(header + blocks)


def forge_declared_size(rng: random.Random, frame: bytes) -> bytes:
    """The frame with its Frame_Content_Size field (if any) set to an interesting value."""
    out = bytearray(frame)
    if len(out) > 5 and out[:4] == b"\x28\xb5\x2f\xfd":
        descriptor = out[4]
        single = descriptor & 0x20
        size = (0, 2, 4, 8)[descriptor >> 6] or (1 if single else 0)
        at = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
        if size:
            put_int(rng, out, at, size, "little")
    return bytes(out)


# --- targets (run in the capped child) ----------------------------------------------------


def warm() -> None:
    chunks(), chunk_size_codecs()
    for size in (1 << 24, 1 << 30, MAX_CHUNK_BYTES):
        bomb(size, True), bomb(size, False)


def exercise(manifest: object) -> None:
    """Use a parsed manifest the way the layout does."""
    from remote.layouts._aiven_manifest import AivenManifest

    assert isinstance(manifest, AivenManifest)
    index = manifest.chunk_index
    _ = index.transformed_file_size, manifest.indexes_object_size, index.chunk_count
    if index.original_file_size:
        chunks = index.chunks_for_range(0, index.original_file_size - 1)
        for chunk in (*chunks[:3], chunks[-1]):
            assert chunk.original_size > 0 and chunk.transformed_size > 0
        index.chunk_at_transformed(index.transformed_file_size // 2)


def fuzz_manifest(rng: random.Random) -> None:
    _, data = rng.choice(manifests())
    doc = json.loads(data)
    way = rng.randrange(4)
    if way == 0:
        text = json.dumps(mutate_json(rng, doc)).encode()
    elif way == 1:
        index = doc["chunkIndex"]
        field = rng.choice([k for k in index if k != "type"] + ["originalFileSize"])
        index[field] = interesting_int(rng)
        text = json.dumps(doc).encode()
    elif way == 2 and doc["chunkIndex"]["type"] == "variable":
        raw = mutate_bytes(rng, rng.choice(chunk_size_codecs()), fields=[(0, 4), (4, 4), (8, 1)])
        doc["chunkIndex"]["transformedChunks"] = base64.b64encode(zstd_frame(rng, raw)).decode()
        text = json.dumps(doc).encode()
    else:
        text = mutate_bytes(rng, data)
    exercise(parse_manifest(text, "fuzz.rsm-manifest"))


def fuzz_chunk_index(rng: random.Random) -> None:
    raw = rng.choice(chunk_size_codecs())
    way = rng.randrange(5)
    if way == 0:
        frame = bomb(rng.choice((1 << 24, 1 << 30)), rng.random() < 0.5)
    elif way == 1:
        count = rng.choice((2, 1000, 10**6, 2**31 - 1))
        width = rng.randint(1, 4)
        body = bytes(rng.choice((0, 2**20)) * width)
        frame = zstd_frame(rng, count.to_bytes(4, "big") + bytes(4) + bytes([width]) + body)
    else:
        frame = zstd_frame(rng, mutate_bytes(rng, raw, fields=[(0, 4), (4, 4), (8, 1)]))
        if way == 2:
            frame = forge_declared_size(rng, frame)
    text = base64.b64encode(frame).decode()
    if rng.random() < 0.1:
        text = text[: rng.randrange(len(text) + 1)] + rng.choice(("", "=", "!", "A"))
    sizes = decode_chunk_sizes(text)
    chunk = rng.choice((4096, 1, interesting_int(rng)))
    file_size = len(sizes) * chunk if rng.random() < 0.7 else interesting_int(rng)
    exercise_index(ChunkIndex(chunk, file_size, sizes))


def exercise_index(index: ChunkIndex) -> None:
    if index.chunk_count:
        index.chunk(index.chunk_count - 1)
        index.chunk_at_transformed(index.transformed_file_size - 1)


def encode_custom_metadata(fields: dict[int, object]) -> bytes:
    """Kafka tagged fields as the plugin writes them (zigzag varlong, compact strings)."""

    def uvarint(v: int) -> bytes:
        out = bytearray()
        while v >= 0x80:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        return bytes(out + bytes([v]))

    out = uvarint(len(fields))
    for tag, value in sorted(fields.items()):
        if isinstance(value, int):
            body = uvarint((value << 1) ^ (value >> 63))
        else:
            text = str(value).encode()
            body = uvarint(len(text) + 1) + text
        out += uvarint(tag) + uvarint(len(body)) + body
    return out


def fuzz_custom_metadata(rng: random.Random) -> None:
    path, _ = rng.choice(manifests())
    key = path.relative_to(AIVEN).parts
    fields: dict[int, object] = {0: rng.choice((0, 23459, 2**62))}
    if rng.random() < 0.7:
        fields[1] = "/".join(key[2:3]) + "/"
    if rng.random() < 0.7:
        fields[2] = "/".join(key[3:]).removesuffix(".rsm-manifest")
    data = encode_custom_metadata(fields)
    decode_custom_metadata(mutate_bytes(rng, data, fields=[(0, 1), (1, 1), (2, 1)]))


def fuzz_detransform(rng: random.Random) -> None:
    stored, chunk, compression, key, aad = rng.choice(chunks())
    way = rng.randrange(6)
    if way == 0:
        stored = mutate_bytes(rng, stored)
    elif way == 1:
        field = rng.choice(("original_size", "transformed_size"))
        value = rng.choice((getattr(chunk, field) + rng.choice((-1, 1)), interesting_int(rng)))
        chunk = Chunk(**{**_fields(chunk), field: value})
    elif way in (2, 3) and compression:
        size = rng.choice((chunk.original_size + 1, 1 << 24, 1 << 30, MAX_CHUNK_BYTES))
        frame = bomb(size, rng.random() < 0.5) if way == 2 else zstd_frame(rng, bytes(4096))
        if rng.random() < 0.5:
            frame = forge_declared_size(rng, frame)
        stored = _encrypt(frame, key, aad) if key is not None else frame
    elif way == 4 and compression:
        frame = forge_declared_size(rng, bytes(cramjam.zstd.compress(b"x" * chunk.original_size)))
        stored = _encrypt(frame, key, aad) if key is not None else frame
    if rng.random() < 0.7:
        chunk = Chunk(**{**_fields(chunk), "transformed_size": len(stored)})
    out = detransform_chunk(stored, chunk, compression, key, aad, "fuzz.log")
    assert len(out) == chunk.original_size


def _fields(chunk: Chunk) -> dict[str, int]:
    return {f: getattr(chunk, f) for f in Chunk.__slots__}


def _encrypt(data: bytes, key: bytes, aad: bytes | None) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    iv = bytes(12)
    return iv + AESGCM(key).encrypt(iv, data, aad)


# --- tests --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target", ["fuzz_manifest", "fuzz_chunk_index", "fuzz_custom_metadata", "fuzz_detransform"]
)
def test_fuzz_under_a_1_gib_cap(target: str) -> None:
    assert_clean(run_fuzz([(f"{HERE}:{target}", CORRUPT)]))


def test_the_fuzz_inputs_are_real() -> None:
    variants = {p.relative_to(AIVEN).parts[0] for p, _ in manifests()}
    assert variants == {"zstd", "plain", "encrypted"}
    assert chunk_size_codecs() and len(chunks()) > 10
    stored, chunk, compression, key, aad = next(c for c in chunks() if c[3] is not None)
    assert len(detransform_chunk(stored, chunk, compression, key, aad)) == chunk.original_size


def _with_file_size(size: int) -> bytes:
    _, data = next(m for m in manifests() if b'"fixed"' in m[1])
    doc = json.loads(data)
    doc["chunkIndex"]["originalFileSize"] = size
    return json.dumps(doc).encode()


def test_the_issue_regression_is_refused_at_once_under_the_cap() -> None:
    """issue 31: ``"originalFileSize": 9223372036854775808`` in a fixed chunk index."""
    data = _with_file_size(9223372036854775808)
    assert b'"originalFileSize": 9223372036854775808' in data
    code = (
        "import resource, sys, time\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({1 << 30}, {1 << 30}))\n"
        "from remote.layouts._aiven_manifest import parse_manifest\n"
        "from remote.errors import CorruptObjectError\n"
        "began = time.monotonic()\n"
        "try:\n"
        "    parse_manifest(sys.stdin.buffer.read(), 'b/k.rsm-manifest', 'k.rsm-manifest')\n"
        "except CorruptObjectError as e:\n"
        "    print(e, e.field, e.object_name, sep='|')\n"
        "    sys.exit(0 if time.monotonic() - began < 0.5 else 3)\n"
        "sys.exit(2)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, cwd=ROOT, timeout=60
    )
    assert child.returncode == 0, child.stderr.decode()[-2000:]
    message, field, object_name = child.stdout.decode().strip().split("|")
    assert message == (
        "b/k.rsm-manifest: chunkIndex.originalFileSize: 9223372036854775808 is out of range"
        " [0, 2147483647]"
    )
    assert (field, object_name) == ("chunkIndex.originalFileSize", "k.rsm-manifest")
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != 1 << 30  # the cap was the child's


@pytest.mark.parametrize("size", [2**31, 2**63 - 1, 2**63, 2**64, -1])
def test_file_sizes_past_a_java_int_are_corrupt(size: int) -> None:
    with pytest.raises(CorruptObjectError, match="originalFileSize"):
        parse_manifest(_with_file_size(size))


def test_a_fixed_index_of_two_billion_chunks_costs_nothing() -> None:
    index = ChunkIndex(1, 2**31 - 1, fixed=(1, 1))
    assert index.chunk_count == 2**31 - 1 == index.transformed_file_size
    assert len(index.chunks_for_range(0, 2**31)) == 2**31 - 1
    assert index.chunk(2**31 - 2).transformed_position == 2**31 - 2


def test_a_chunk_that_decompresses_past_its_size_is_a_bomb() -> None:
    chunk = next(c[1] for c in chunks() if c[2] and c[3] is None)
    for declared in (True, False):
        frame = bomb(1 << 30, declared)
        assert len(frame) < 64 * 1024
        big = Chunk(**{**_fields(chunk), "transformed_size": len(frame)})
        with pytest.raises(CorruptObjectError, match=f"chunk {chunk.number}") as e:
            detransform_chunk(frame, big, True, None, None, "s3://b/k.log", "k.log")
        assert e.value.object_name == "k.log" and str(e.value).startswith("s3://b/k.log: ")
