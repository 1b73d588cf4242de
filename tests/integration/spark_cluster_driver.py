"""A Spark driver in client mode against a standalone master, serving reads on request.

Run by ``tests.fixtures.spark_cluster.ClusterDriver``:
``python spark_cluster_driver.py spark://127.0.0.1:P '{"spark.conf.key": "value", ...}'``.
It starts a SparkSession on that master with those confs (and its own defaults below),
registers ``kafka-archive`` and prints ``{"ready": ...}``; then, for each JSON line on
stdin, answers one JSON line on stdout:

- ``{"op": "read", "options": {...}, "conf": {...}, "out": PATH, "notify_running": B}``:
  sets the Spark confs (and registers again, which is when kafka-archive reads them),
  reads ``format("kafka-archive")`` with the options into an Arrow IPC file at PATH and
  answers ``{"ok": true, "rows": N, "failed_tasks": F, "load_s": ..., "read_s": ...}``,
  or ``{"ok": false, "error": TEXT}``; with ``notify_running`` it first answers
  ``{"running": true}`` once two tasks run at the same time (one per worker), so a
  test can kill a worker mid-read;
- ``{"op": "stop"}``: stops the session and exits 0.

Invariant: stdout carries only those JSON lines (everything else, the JVM's included,
goes to stderr); the session is stopped however the script ends; end of stdin stops it.
Importing the module (for ``APP_CONF``, the cluster applications' common conf) changes
no file descriptor.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import IO, Any

# What every application on the test cluster sets (this driver's sessions, and the jobs
# tests submit with spark-submit): small executors (1 core each, so each worker runs
# one), a driver on loopback, and a task given a second attempt.
APP_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.task.maxFailures": "2",  # a lost executor costs one failure of its tasks
    "spark.python.worker.reuse": "true",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    # Start jobs only once every executor asked for is there (both workers read).
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
}
# This driver's sessions also run their Python workers on the venv's interpreter.
DEFAULTS = {**APP_CONF, "spark.pyspark.python": sys.executable}

_OUT: IO[str] = sys.stdout


def take_stdout() -> None:
    """The protocol's stdout: fd 1 becomes stderr, so nothing else (the JVM inherits
    fd 1) can write between the JSON lines."""
    global _OUT
    _OUT = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def reply(message: dict[str, Any]) -> None:
    _OUT.write(json.dumps(message) + "\n")


def read(spark: Any, command: dict[str, Any]) -> dict[str, Any]:
    import pyarrow as pa

    import rlmm.spark

    if command.get("conf"):
        for key, value in command["conf"].items():
            spark.conf.set(key, value)
        rlmm.spark.register(spark)
    reader = spark.read.format("kafka-archive")
    for key, value in command.get("options", {}).items():
        reader = reader.option(key, value)
    tracker = spark.sparkContext.statusTracker()
    result: dict[str, Any] = {}

    started = time.monotonic()

    def run() -> None:
        try:
            df = reader.load()
            result["load_s"] = round(time.monotonic() - started, 1)
            result["table"] = df.toArrow()
        except Exception as e:
            result["error"] = str(e)

    job = threading.Thread(target=run, daemon=True)
    job.start()
    stages: set[int] = set()
    notified = not command.get("notify_running")
    while job.is_alive():
        active = 0
        for stage in tracker.getActiveStageIds():
            stages.add(stage)
            info = tracker.getStageInfo(stage)
            active += info.numActiveTasks if info is not None else 0
        if not notified and active >= 2:
            reply({"running": True})
            notified = True
        job.join(timeout=0.05)
    if "error" in result:
        return {"ok": False, "error": result["error"], "load_s": result.get("load_s"),
                "read_s": round(time.monotonic() - started, 1)}  # fmt: skip
    table = result["table"]
    with pa.OSFile(command["out"], "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    infos = [tracker.getStageInfo(s) for s in stages]
    failed = sum(i.numFailedTasks for i in infos if i is not None)
    return {"ok": True, "rows": table.num_rows, "failed_tasks": failed,
            "load_s": result["load_s"], "read_s": round(time.monotonic() - started, 1)}  # fmt: skip


def main(master: str, conf: dict[str, str]) -> None:
    from pyspark.sql import SparkSession

    import rlmm.spark

    builder = SparkSession.builder.master(master).appName("rlmm-cluster-tests")
    for key, value in {**DEFAULTS, **conf}.items():
        builder = builder.config(key, value)
    started = time.monotonic()
    spark = builder.getOrCreate()
    try:
        spark.sparkContext.setLogLevel("WARN")
        rlmm.spark.register(spark)
        reply({"ready": True, "app": spark.sparkContext.applicationId, "cwd": os.getcwd(),
               "start_s": round(time.monotonic() - started, 1)})  # fmt: skip
        for line in sys.stdin:
            command = json.loads(line)
            if command["op"] == "stop":
                break
            reply(read(spark, command))
    finally:
        spark.stop()


if __name__ == "__main__":
    take_stdout()  # first: before the JVM starts and inherits fd 1
    main(sys.argv[1], json.loads(sys.argv[2]))
