"""bench/soak.py's samples go to its work dir as they are taken, and its report reads
them back from there: a run that dies before its report (an exception in its end
checks, a SIGKILL) leaves every sample it took, and ``--report-from WORK`` reports them.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak import (
    RUN_FILE,
    Sample,
    SampleLog,
    Settings,
    Sidecar,
    Tally,
    _resources,
    main,
    read_samples,
    resources_from,
    workdir,
    write_run,
)

MIB = 1 << 20


def test_each_sample_is_on_disk_once_taken_and_a_torn_last_line_is_left_out(
    tmp_path: Path,
) -> None:
    path = tmp_path / "samples" / "sidecar.jsonl"
    log = SampleLog(path)
    log.append((100.0, 1, 50 * MIB, 12))
    log.append((102.0, 1, 51 * MIB, 13))
    # not closed, as after a crash: another reader sees both lines already
    assert read_samples(path) == [(100.0, 1, 50 * MIB, 12), (102.0, 1, 51 * MIB, 13)]
    with path.open("a") as f:
        f.write('{"t": 104.0, "incarnation": 1, "rs')  # the write a SIGKILL cut short
    assert len(read_samples(path)) == 2
    log.close()
    assert read_samples(tmp_path / "none.jsonl") == []
    path.write_text('{"t": 1.0, "incarnation": 1, "rss": 1, "fds": 1}\nnot json\n{}\n')
    with pytest.raises(ValueError, match=r"sidecar\.jsonl:2: not a sample"):
        read_samples(path)


def _run_dir(tmp_path: Path, brokers: int = 1) -> tuple[Path, dict[str, list[Sample]]]:
    """A work dir as a run leaves it: run.json and an hour of samples every 2 s, RSS
    growing 6 MiB an hour in the last incarnation (node 1), flat elsewhere."""
    work = tmp_path / "work"
    s = Settings(duration_s=3600.0, brokers=brokers)
    started = 1000.0
    nodes = ["1"] if brokers == 1 else ["1", "2", "3"]
    logs: dict[str, SampleLog] = {}
    samples: dict[str, list[Sample]] = {}
    for node in nodes:
        logs[node] = SampleLog(work / "samples" / f"sidecar-{node}.jsonl")
        grow = 6 * MIB / 3600 if node == "1" else 0.0
        samples[node] = [
            (started + t, 1 if t < 1800 else 2, int(80 * MIB + grow * t), 20)
            for t in range(0, 3600, 2)
        ]
        for sample in samples[node]:
            logs[node].append(sample)
        logs[node].close()
    write_run(work, s, started, logs)
    return work, samples


def test_the_report_s_resources_come_from_the_files(tmp_path: Path) -> None:
    work, samples = _run_dir(tmp_path)
    got = resources_from(work)
    assert got == _resources(samples["1"], 1000.0 + 1800, 1000.0 + 2700)
    assert got["samples"] == 1800
    assert got["rss_mib"]["growth_last_half_mib_per_hour"] == pytest.approx(6.0, abs=0.1)
    assert got["fds"]["max"] == 20

    cluster, per_node = _run_dir(tmp_path / "cluster", brokers=3)
    got3 = resources_from(cluster)
    assert set(got3) == {"1", "2", "3"}
    assert got3["2"]["rss_mib"]["growth_mib_per_hour"] == 0.0
    assert got3["1"] == _resources(per_node["1"], 2800.0, 3700.0)


def test_report_from_prints_a_previous_run_s_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work, _ = _run_dir(tmp_path)
    assert main(["--report-from", str(work)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["report_from"] == str(work)
    assert report["run"]["duration_s"] == 3600.0
    assert report["resources"] == resources_from(work)
    # a directory that is not a soak's work dir: a usage error, nothing run
    with pytest.raises(SystemExit) as exit_:
        main(["--report-from", str(tmp_path)])
    assert exit_.value.code == 2
    assert RUN_FILE in capsys.readouterr().err


def test_a_run_that_fails_keeps_its_work_dir_one_that_ends_removes_it(tmp_path: Path) -> None:
    s = Settings(work=tmp_path / "ok")
    with workdir(s) as work:
        work.path.mkdir()
    assert not work.path.exists()
    s = Settings(work=tmp_path / "crashed")
    with pytest.raises(RuntimeError), workdir(s) as work:
        work.path.mkdir()
        raise RuntimeError("an end check crashed")
    assert work.path.exists()
    s = Settings(work=tmp_path / "not-ok")  # it ended, with failures in its report
    with workdir(s) as work:
        work.path.mkdir()
        work.failed = True
    assert work.path.exists()


async def test_the_sidecar_s_sampler_writes_as_it_samples(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    sc = Sidecar(work / "c.toml", Settings(), work / "logs", Tally(), tmp_path)
    sc.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    sc.starts = 1
    try:
        task = asyncio.create_task(sc.sample())
        path = work / "samples" / "sidecar.jsonl"
        for _ in range(100):
            if read_samples(path):
                break
            await asyncio.sleep(0.05)
        # on disk while the sampler still runs
        [(t, incarnation, rss, fds)] = read_samples(path)
        assert incarnation == 1 and rss > 0 and fds >= 0 and t > 0  # (it may be exec-ing)
        sc.stopping.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        sc.proc.kill()
        sc.proc.wait()
