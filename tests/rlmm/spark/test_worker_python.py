"""A worker interpreter without rlmm or pyarrow is named on the driver, with the fix
(PYSPARK_PYTHON), before any job runs, not as a worker's bare ModuleNotFoundError."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from rlmm.spark import WorkerPythonError, register, worker_python_problem


def bare_python(tmp_path: Path) -> str:
    """An interpreter without site-packages (no pyarrow, no rlmm), as a stray python3."""
    script = tmp_path / "python3"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_a_worker_python_without_rlmm_is_named(tmp_path: Path) -> None:
    assert worker_python_problem(sys.executable) is None
    problem = worker_python_problem(bare_python(tmp_path))
    assert problem is not None
    assert "cannot import rlmm and pyarrow" in problem
    assert f"PYSPARK_PYTHON={sys.executable}" in problem and "\n" not in problem


def test_register_refuses_before_a_job_fails(tmp_path: Path) -> None:
    class Conf:
        def get(self, key: str, default: Any = None) -> Any:
            return bare_python(tmp_path) if key == "spark.pyspark.python" else default

    class Session:
        conf = Conf()
        registered: list[Any] = []

        class dataSource:
            @staticmethod
            def register(source: Any) -> None:
                Session.registered.append(source)

    with pytest.raises(WorkerPythonError, match="PYSPARK_PYTHON"):
        register(Session())
    assert Session.registered == []
