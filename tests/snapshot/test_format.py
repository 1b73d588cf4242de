"""Snapshot format: round trips, the documented byte layout, and every bad input.

The frames here are built by hand (struct + crc32c) from the layout in the module
docstring, so the tests check the documented format, not just encode/decode symmetry.
"""

from __future__ import annotations

import re
import struct
from typing import Any

import crc32c
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapshot import (
    FORMAT_VERSION,
    MAGIC,
    Snapshot,
    SnapshotCorruptError,
    SnapshotEncodeError,
    SnapshotError,
    SnapshotInvalidError,
    SnapshotVersionError,
    decode_snapshot,
    encode_snapshot,
    encode_snapshot_parts,
    verify_snapshot,
)

SOURCE = "/var/lib/rlmm/snapshots/snapshot-00000000000000000007.rlmm"


def frame(body: bytes, version: int = FORMAT_VERSION, magic: bytes = MAGIC) -> bytes:
    """A snapshot file around ``body`` with a correct length and CRC."""
    head = magic + struct.pack(">HQ", version, len(body)) + body
    return head + struct.pack(">I", crc32c.crc32c(head))


def body_of(**fields: Any) -> bytes:
    base: dict[str, Any] = {
        "partition_count": 4,
        "applied_offsets": {0: 5, 2: 9},
        "created_ms": 1_700_000_000_000,
        "state": [[1, b"x"]],
    }
    base.update(fields)
    return msgpack.packb({k: v for k, v in base.items() if v is not _DROP})


_DROP = object()


def sample(state: Any = None) -> Snapshot:
    return Snapshot(
        partition_count=50,
        applied_offsets={0: 17, 7: 0, 49: 2**40},
        state=state if state is not None else {"segments": [[1, 2, b"id", "t", None, True]]},
        created_ms=1_700_000_000_123,
    )


# ------------------------------------------------------------------ round trips


def test_round_trip_and_layout() -> None:
    snap = sample()
    data = encode_snapshot(snap)
    assert data[:8] == MAGIC
    version, body_length = struct.unpack_from(">HQ", data, 8)
    assert version == FORMAT_VERSION == 2
    assert len(data) == 8 + 2 + 8 + body_length + 4
    assert struct.unpack(">I", data[-4:])[0] == crc32c.crc32c(data[:-4])
    body = msgpack.unpackb(data[18:-4], strict_map_key=False)
    assert body["partition_count"] == 50
    assert body["applied_offsets"] == {0: 17, 7: 0, 49: 2**40}
    decoded = decode_snapshot(data, SOURCE)
    assert decoded == snap
    assert dict(decoded.applied_offsets) == {0: 17, 7: 0, 49: 2**40}


def test_parts_concatenate_to_the_file() -> None:
    snap = sample()
    header, body, trailer = encode_snapshot_parts(snap)
    try:
        assert header + bytes(body) + trailer == encode_snapshot(snap)
    finally:
        body.release()


def test_decode_accepts_any_bytes_like() -> None:
    data = encode_snapshot(sample())
    assert decode_snapshot(bytearray(data)) == sample()
    assert decode_snapshot(memoryview(data)) == sample()


def test_tuples_come_back_as_lists() -> None:
    snap = sample(state=[(1, 2), bytearray(b"ab")])
    assert decode_snapshot(encode_snapshot(snap)).state == [[1, 2], b"ab"]


def test_unknown_body_fields_are_ignored() -> None:
    data = frame(body_of(future_field=[1, 2, 3]))
    assert decode_snapshot(data).partition_count == 4


def test_repr_never_prints_the_state() -> None:
    text = repr(sample(state=["x" * 1000]))
    assert "xxx" not in text
    assert "partition_count=50" in text


def test_applied_offsets_are_read_only_and_copied() -> None:
    offsets = {0: 1}
    snap = Snapshot(1, offsets, None, 0)
    offsets[0] = 99
    assert snap.applied_offsets[0] == 1
    with pytest.raises(TypeError):
        snap.applied_offsets[0] = 5  # type: ignore[index]


# msgpack-serialisable states: what the RLMM cache is made of.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.binary(max_size=64)
    | st.text(max_size=32)
    | st.floats(allow_nan=False)
)
_keys = (
    st.text(max_size=8)
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.binary(max_size=8)
)
states = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(_keys, children, max_size=6),
    max_leaves=40,
)
offsets = st.dictionaries(
    st.integers(min_value=0, max_value=49), st.integers(min_value=0, max_value=2**63 - 1)
)


@given(state=states, applied=offsets, created_ms=st.integers(0, 2**63 - 1))
def test_round_trip_property(state: Any, applied: dict[int, int], created_ms: int) -> None:
    snap = Snapshot(50, applied, state, created_ms)
    assert decode_snapshot(encode_snapshot(snap)) == snap


# ------------------------------------------------------------------ construction


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"partition_count": 0}, "partition_count"),
        ({"partition_count": True}, "partition_count"),
        ({"partition_count": "4"}, "partition_count"),
        ({"applied_offsets": [(0, 1)]}, "applied_offsets"),
        ({"applied_offsets": {4: 1}}, "partition 4"),
        ({"applied_offsets": {-1: 1}}, "partition -1"),
        ({"applied_offsets": {0: -1}}, "applied_offsets[0]"),
        ({"applied_offsets": {0: 2**63}}, "applied_offsets[0]"),
        ({"applied_offsets": {0: 1.0}}, "applied_offsets[0]"),
        ({"applied_offsets": {True: 1}}, "partition True"),
        ({"created_ms": -5}, "created_ms"),
        ({"created_ms": None}, "created_ms"),
    ],
)
def test_invalid_fields_rejected(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {
        "partition_count": 4,
        "applied_offsets": {0: 1},
        "state": None,
        "created_ms": 0,
    }
    args.update(kwargs)
    with pytest.raises(SnapshotInvalidError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Snapshot(**args)
    assert issubclass(SnapshotInvalidError, ValueError)


@pytest.mark.parametrize(
    "state",
    [{1, 2}, object(), 2**64, -(2**63) - 1, {"nested": [{3}]}],
)
def test_unserialisable_state(state: Any) -> None:
    with pytest.raises(SnapshotEncodeError, match="not msgpack-serialisable"):
        encode_snapshot(sample(state=state))


def nested(depth: int) -> Any:
    deep: Any = []
    for _ in range(depth - 1):
        deep = [deep]
    return deep


def test_nesting_limits() -> None:
    # See the format docstring: msgpack packs 1025 levels, unpacks 1024 (body map included).
    state = decode_snapshot(encode_snapshot(sample(state=nested(1023)))).state
    depth = 1
    while state:  # iterative: == on 1023 levels would hit Python's recursion limit
        (state,) = state
        depth += 1
    assert depth == 1023
    with pytest.raises(SnapshotCorruptError, match="StackError"):
        decode_snapshot(encode_snapshot(sample(state=nested(1024))))
    with pytest.raises(SnapshotEncodeError, match="recursion limit"):
        encode_snapshot(sample(state=nested(1025)))


# ------------------------------------------------------------------ bad input


def _decode_error(data: bytes) -> SnapshotError:
    with pytest.raises(SnapshotError) as info:
        decode_snapshot(data, SOURCE)
    assert SOURCE in str(info.value)
    return info.value


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated: 0 bytes"),
        (MAGIC + b"\x00\x01", "truncated: 10 bytes"),
        (b"PAR1" + bytes(40), "bad magic"),
        (frame(body_of())[:-1], "truncated"),
        (frame(body_of())[:30], "truncated"),
        (frame(body_of()) + b"\x00", "1 unexpected bytes after the CRC"),
        (frame(body_of(), version=0), "unknown format version 0"),
        (frame(b"\xc1"), "not valid msgpack: FormatError"),
        (frame(b"\x91"), "not valid msgpack"),
        (frame(b"\x91" * 5000), "not valid msgpack: StackError"),
        (frame(body_of() + b"\x00"), "not valid msgpack: ExtraData"),
        (frame(b"\xa2\xff\xfe"), "not valid msgpack"),  # invalid UTF-8 str
        (frame(b"\x81\x92\x01\x02\x00"), "not valid msgpack: TypeError"),  # array as map key
        (frame(msgpack.packb(msgpack.ExtType(7, b"zz"))), "extension type 7"),
        (frame(msgpack.packb([1, 2])), "body is a list, expected a map"),
        (frame(msgpack.packb(None)), "body is a NoneType"),
        (frame(body_of(state=_DROP, created_ms=_DROP)), r"lacks field\(s\) created_ms, state"),
        (frame(body_of(applied_offsets=[[0, 5]])), "applied_offsets is a list"),
        (frame(body_of(partition_count="4")), "partition_count must be an int"),
        (frame(body_of(partition_count=False)), "partition_count must be an int"),
        (frame(body_of(applied_offsets={9: 1})), "partition 9"),
        (frame(body_of(applied_offsets={"0": 1})), "partition '0'"),
        (frame(body_of(applied_offsets={0: -2})), r"applied_offsets\[0\]"),
        (frame(body_of(created_ms=1.5)), "created_ms"),
    ],
)
def test_bad_input_is_corrupt(data: bytes, reason: str) -> None:
    error = _decode_error(data)
    assert isinstance(error, SnapshotCorruptError)
    assert error.source == SOURCE
    assert re.search(reason, str(error)), str(error)


def test_flipped_bit_is_a_crc_mismatch() -> None:
    data = bytearray(encode_snapshot(sample()))
    data[25] ^= 0x10
    error = _decode_error(bytes(data))
    assert isinstance(error, SnapshotCorruptError)
    assert "CRC-32C mismatch" in error.reason


def test_forged_length_prefix_allocates_nothing_big() -> None:
    # A map whose state claims 2**32-1 array items but holds none: the CRC is valid,
    # so only the length limits stop msgpack from pre-allocating a 32 GiB list.
    body = msgpack.packb({"partition_count": 1, "applied_offsets": {}, "created_ms": 0})
    forged = body[:0] + b"\x84" + body[1:] + msgpack.packb("state") + b"\xdd\xff\xff\xff\xff"
    error = _decode_error(frame(forged))
    assert isinstance(error, SnapshotCorruptError)


def test_version_1_files_are_still_read() -> None:
    snap = sample()
    data = encode_snapshot(snap)
    body = data[18:-4]
    old = frame(body, version=1)
    assert decode_snapshot(old, SOURCE) == snap
    verify_snapshot(old, SOURCE)


def test_newer_version_has_its_own_error() -> None:
    error = _decode_error(frame(b"whatever a v3 body is", version=3))
    assert isinstance(error, SnapshotVersionError)
    assert not isinstance(error, SnapshotCorruptError)
    assert (error.version, error.supported) == (3, 2)
    assert "newer rlmm" in str(error)


def test_newer_version_with_bad_crc_is_corrupt() -> None:
    data = bytearray(frame(b"v3 body", version=3))
    data[-1] ^= 1
    assert isinstance(_decode_error(bytes(data)), SnapshotCorruptError)


def test_verify_checks_the_frame_only() -> None:
    verify_snapshot(encode_snapshot(sample()))
    verify_snapshot(frame(b"\xc1"))  # body defects need a full decode
    with pytest.raises(SnapshotCorruptError, match="CRC"):
        verify_snapshot(frame(b"\xc1")[:-1] + b"\x00", SOURCE)
    with pytest.raises(SnapshotVersionError):
        verify_snapshot(frame(b"", version=3), SOURCE)


# ------------------------------------------------------------------ fuzzing

_VALID = encode_snapshot(sample(state={"segments": [[i, b"seg", "t"] for i in range(20)]}))


def _only_snapshot_errors(data: bytes) -> None:
    try:
        decode_snapshot(data, SOURCE)
    except SnapshotError as error:
        assert SOURCE in str(error)


@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    _only_snapshot_errors(data)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_after_magic(data: bytes) -> None:
    _only_snapshot_errors(MAGIC + data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(0, 3))
def test_arbitrary_body_in_a_valid_frame(body: bytes, version: int) -> None:
    # Past the CRC: the msgpack and shape checks alone must hold the line.
    _only_snapshot_errors(frame(body, version=version))


@settings(max_examples=300)
@given(st.lists(st.integers(0, len(_VALID) * 8 - 1), min_size=1, max_size=3, unique=True))
def test_bit_flips_are_always_detected(bits: list[int]) -> None:
    # CRC-32C has Hamming distance >= 4 at these lengths: up to 3 flipped bits are
    # always caught, wherever they land (header fields included).
    data = bytearray(_VALID)
    for bit in bits:
        data[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(SnapshotError):
        decode_snapshot(bytes(data), SOURCE)


@given(st.integers(0, len(_VALID) - 1))
def test_truncations_are_always_detected(length: int) -> None:
    with pytest.raises(SnapshotCorruptError, match="truncated"):
        decode_snapshot(_VALID[:length], SOURCE)
