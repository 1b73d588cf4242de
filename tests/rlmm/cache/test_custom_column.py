"""CustomMetadataColumn against a dict: the same answers after any sequence of writes,
and its blob never more than about twice what is live."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmm.cache import _custom_column
from rlmm.cache._custom_column import CustomMetadataColumn

ROWS = 40
values = st.binary(max_size=300)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(0, ROWS - 1), values),
        st.tuples(st.just("pop"), st.integers(0, ROWS + 5), st.none()),
        st.tuples(st.just("renumber"), st.randoms(use_true_random=False), st.none()),
    ),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_the_column_answers_as_a_dict_does(steps: list[tuple[str, object, object]]) -> None:
    saved = _custom_column._REPACK_MIN_GARBAGE
    setattr(_custom_column, "_REPACK_MIN_GARBAGE", 256)  # rewrites within a short run  # noqa: B010
    try:
        column, model = CustomMetadataColumn(), dict[int, bytes]()
        for op, arg, value in steps:
            if op == "set":
                assert isinstance(arg, int) and isinstance(value, bytes)
                column.set(arg, value)
                model[arg] = value
            elif op == "pop":
                assert isinstance(arg, int)
                column.pop(arg)
                model.pop(arg, None)
            else:  # a compaction: some rows dropped, the others renumbered in order
                rng = arg
                keep = [r for r in range(ROWS) if rng.random() < 0.7]  # type: ignore[attr-defined]
                remap = [-1] * ROWS
                for new, old in enumerate(keep):
                    remap[old] = new
                column.renumber(remap)
                model = {remap[r]: v for r, v in model.items() if remap[r] >= 0}
            assert len(column) == len(model) and bool(column) == bool(model)
            assert list(column.items()) == sorted(model.items())
            assert [column.get(r) for r in range(ROWS + 5)] == [
                model.get(r) for r in range(ROWS + 5)
            ]
            live = sum(len(v) for v in model.values())
            assert column.stored_bytes <= max(2 * live, live + 256) + 300
    finally:
        setattr(_custom_column, "_REPACK_MIN_GARBAGE", saved)  # noqa: B010


def test_replacing_every_value_keeps_the_blob_bounded() -> None:
    """A value rewritten again and again (an update per retry) does not grow the blob."""
    column = CustomMetadataColumn()
    for i in range(20_000):
        column.set(i % 100, bytes([i % 256]) * 60)
    assert len(column) == 100
    assert column.stored_bytes <= 2 * 100 * 60 + _custom_column._REPACK_MIN_GARBAGE + 60
    assert column.get(99) == bytes([19_999 % 256]) * 60


def test_a_negative_row_is_refused() -> None:
    column = CustomMetadataColumn()
    with pytest.raises(IndexError, match="row -1"):
        column.set(-1, b"x")
    assert column.get(0) is None and not column
