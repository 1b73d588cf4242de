"""A kafka-archive batch job as users submit it: ``spark-submit --py-files rlmm.zip`` this.

Run by ``tests/integration/test_spark_cluster.py`` with the installed pyspark's own
``bin/spark-submit`` against the standalone test cluster:
``spark-submit --master spark://... --py-files rlmm-0.1.0.zip spark_submit_job.py REQUEST``.
REQUEST is a JSON file: ``reads`` ({name: kafka-archive options}), ``out_dir`` and
``result`` (paths on the driver's host). The job first runs a probe task per executor
(its interpreter, where ``rlmm`` was imported from, and whether that interpreter imports
rlmm without the shipped file), registers kafka-archive (settings from the
``spark.rlmm.*`` conf given to spark-submit), writes each read to
``<out_dir>/<name>.arrow`` (Arrow IPC) and writes ``result``: ``probes``,
``driver_rlmm`` (where the driver imported rlmm from) and ``rows`` per read.

Invariant: it imports nothing of this repository but ``rlmm`` (as a job on a cluster
would, from what spark-submit shipped), and the SparkSession is stopped however it ends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any


def probe(index: int) -> dict[str, Any]:
    """On an executor: what its Python worker has, with and without ``--py-files``."""
    import rlmm

    # A fresh interpreter of the same kind, with the worker's environment but not the
    # files Spark put on the worker's sys.path: what the executor's Python itself has.
    bare = subprocess.run(
        [sys.executable, "-c", "import pyarrow; import rlmm"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return {
        "index": index,
        "host": socket.gethostname(),
        "cwd": os.getcwd(),
        "executable": os.path.realpath(sys.executable),
        "rlmm": rlmm.__file__,
        "bare_returncode": bare.returncode,
        "bare_error": (bare.stderr.strip().splitlines() or [""])[-1],
    }


def main(request_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    import pyarrow as pa
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("rlmm-spark-submit").getOrCreate()
    try:
        spark.sparkContext.setLogLevel("WARN")
        workers = int(spark.conf.get("spark.cores.max", "2"))
        probes = spark.sparkContext.parallelize(range(workers), workers).map(probe).collect()
        import rlmm
        import rlmm.spark

        rlmm.spark.register(spark)
        rows = {}
        for name, options in request["reads"].items():
            reader = spark.read.format("kafka-archive")
            for key, value in options.items():
                reader = reader.option(key, value)
            table = reader.load().toArrow()
            out = Path(request["out_dir"]) / f"{name}.arrow"
            with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
            rows[name] = table.num_rows
        Path(request["result"]).write_text(
            json.dumps({"probes": probes, "driver_rlmm": rlmm.__file__, "rows": rows})
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
