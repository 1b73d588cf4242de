"""The archive on S3 (moto's HTTP server): planned on the driver, each slice read in
another process from nothing but the pickled slice (ranged GETs), as an executor does."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest

from rlmm.archive import ReadRequest, Slice, open_metadata_view, plan_slices
from rlmm.archive.reader import read_slice
from tests.rlmm.archive.archive_data import (
    archived,
    expected_rows,
    make_config,
    offload,
    rows,
    write_history,
)

pytestmark = pytest.mark.s3


def read_in_executor(blob: bytes) -> list[tuple[Any, ...]]:
    piece: Slice = pickle.loads(blob)
    return rows(read_slice(piece))


def test_read_from_s3_in_other_processes(s3_endpoint: str, tmp_path: Path) -> None:
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="archive")
    config = make_config(
        tmp_path / "rlmm",
        **{"remote.type": "s3", "remote.bucket": "archive", "remote.endpoint_url": s3_endpoint},
    )
    pdir, expected = write_history(tmp_path / "logs", "s3t", 0, "zstd")
    asyncio.run(offload(config, [pdir]))
    expected = archived(pdir, expected)
    for level, wanted in (
        ("read_uncommitted", expected),
        ("read_committed", [e for e in expected if not e.aborted]),
    ):
        request = ReadRequest(
            topics=("s3t",), include_headers=True, isolation_level=level, max_slice_bytes=900
        )
        with open_metadata_view(config) as view:
            slices = plan_slices(view, request, config.remote_options())
        assert any(s.start_position > 0 for s in slices)  # ranged GETs inside segments
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(2, mp_context=context) as pool:
            parts = list(pool.map(read_in_executor, [pickle.dumps(s) for s in slices]))
        assert [r for part in parts for r in part] == expected_rows(wanted)
