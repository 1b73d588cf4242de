"""`rlmm events` over the live event log and over a raw segment file with a corrupted
record; `rlmm snapshot inspect`; and bad input: one clear line, non-zero exit, never a
traceback. Run as a user runs them (new processes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from remote.segments.batch import RecordBatchReader
from rlmm.partitioning import metadata_partition_for
from snapshot import FORMAT_VERSION
from tests.rlmm.cli.store import Store, build_store, run_cli, sid


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return build_store(tmp_path_factory.mktemp("store"))


def lines(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_events_from_the_log_and_from_a_corrupted_segment_file(
    store: Store, tmp_path: Path
) -> None:
    tp = next(iter(store.segments))
    p = metadata_partition_for(tp, 4)
    live = store.run("events", "--metadata-partition", str(p))
    assert live.returncode == 0, live.stderr
    events = lines(live.stdout)
    copied = store.segments[tp]
    mine = [e for e in events if e["topic"] == "orders" and e["partition"] == tp.partition]
    assert [(e["segment_id"], e["state"]) for e in mine] == [
        (sid(m), state)
        for m in copied
        for state in ("COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED")
    ]
    assert [e["offset"] for e in events] == list(range(len(events)))

    source = store.config.data_dir / "metadata-log" / f"__remote_log_metadata-{p}" / f"{0:020d}.log"
    dump_dir = tmp_path / f"__remote_log_metadata-{p}"
    dump_dir.mkdir()
    target = dump_dir / source.name
    shutil.copy(source, target)
    data = bytearray(target.read_bytes())
    batches = list(RecordBatchReader(bytes(data)))
    victim = batches[2]
    data[victim.position + 40] ^= 0x77
    target.write_bytes(bytes(data))

    dumped = run_cli("events", str(target))
    assert dumped.returncode == 1, dumped.stderr  # a record could not be decoded
    out = lines(dumped.stdout)
    errors = [e for e in out if "error" in e]
    assert [(e["offset"], e["position"]) for e in errors] == [(victim.base_offset, victim.position)]
    assert "CRC" in str(errors[0]["error"]) and str(target) in str(errors[0]["error"])
    bad = set(range(victim.base_offset, victim.last_offset + 1))
    rest = [{k: v for k, v in e.items() if k != "position"} for e in out if "error" not in e]
    assert rest == [e for e in events if e["offset"] not in bad]  # the rest, all of it

    from_three = lines(run_cli("events", str(target), "--from-offset", "3").stdout)
    assert min(int(str(e["offset"])) for e in from_three) >= 3


def test_snapshot_inspect(store: Store, tmp_path: Path) -> None:
    shown = store.run("snapshot", "inspect", "--json")
    assert shown.returncode == 0, shown.stderr
    reports = json.loads(shown.stdout)["snapshots"]
    assert reports and all(r["ok"] for r in reports)
    newest = reports[0]
    assert newest["format_version"] == FORMAT_VERSION and newest["partition_count"] == 4
    assert newest["segments"] == sum(len(ms) for ms in store.segments.values())
    assert newest["segments_by_state"] == {"COPY_SEGMENT_FINISHED": newest["segments"]}

    corrupt = tmp_path / "snapshot-00000000000000000009.rlmm"
    data = bytearray(Path(newest["path"]).read_bytes())
    data[30] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    result = run_cli("snapshot", "inspect", str(corrupt))
    assert result.returncode == 1
    assert "CORRUPT" in result.stdout and "CRC-32C mismatch" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "x",
    "AWS_SECRET_ACCESS_KEY": "x",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def one_error_line(result: object, *needles: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    err: str = result.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_bad_input_is_one_clear_line(store: Store, tmp_path: Path) -> None:
    one_error_line(store.run("segments", "list", "--set", "nope.x=1"), "unknown section 'nope'")
    bad_file = tmp_path / "bad.toml"
    bad_file.write_text("[manager]\nwrite_timeout = 3\n")
    one_error_line(
        run_cli("partitions", "--config", str(bad_file)), "manager.write_timeout", str(bad_file)
    )
    one_error_line(
        store.run("segments", "show", "AAAAAAAAAAAAAAAAAAAAAA"),
        "unknown segment id AAAAAAAAAAAAAAAAAAAAAA",
    )
    as_json = store.run("segments", "show", "AAAAAAAAAAAAAAAAAAAAAA", "--json")
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["error"]["type"] == "RemoteResourceNotFoundError"
    # base64url ids may start with "-": still an id, not an unknown option
    dashed = store.run("segments", "show", "-b0w86WETV-ESQCTZb0w8A", "--json")
    assert dashed.returncode == 2
    assert json.loads(dashed.stdout)["error"]["type"] == "RemoteResourceNotFoundError"
    unreachable = store.run(
        "verify", "--set", "remote.type=s3", "--set", "remote.bucket=b",
        "--set", "remote.endpoint_url=http://127.0.0.1:9", "--set", "remote.max_attempts=1",
        "--set", "remote.connect_timeout=2",
        env=AWS_ENV,
    )  # fmt: skip
    one_error_line(unreachable, "127.0.0.1:9")
    kafka = tmp_path / "kafka.toml"
    kafka.write_text(
        f'data_dir = "{tmp_path}"\n[manager]\nready_timeout_s = 3\n'
        '[eventlog]\ntype = "kafka"\nbootstrap_servers = "127.0.0.1:9"\n'
    )
    no_broker = run_cli("partitions", "--config", str(kafka))
    one_error_line(no_broker, "127.0.0.1:9")
    one_error_line(run_cli("events", str(tmp_path / "missing.log")), "missing.log")
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(b"\x00\x00\x00\x00\x00\x00\x00\x05\xff\xff\xff\xf0" + bytes(100))
    malformed = run_cli("events", str(garbage))
    assert malformed.returncode == 1 and "Traceback" not in malformed.stderr
    (entry,) = lines(malformed.stdout)
    assert "dump stopped" in str(entry["error"]) and entry["position"] == 0


def test_unknown_topics_and_conflicting_flags_are_named(store: Store) -> None:
    for command in (("segments", "list"), ("partitions",)):
        done = store.run(*command, "--topic", "nosuch")
        assert done.returncode == 2, done.stdout
        assert "unknown topic 'nosuch'" in done.stderr and "known: orders" in done.stderr
    raw = store.run("records", "orders", "--format", "raw", "--json")
    # a usage error too is the JSON error object under --json (one line on stderr without)
    assert raw.returncode == 2 and raw.stderr == "", raw.stderr
    assert "not with --json" in json.loads(raw.stdout)["error"]["message"]
    helped = run_cli("events", "--help")
    assert "one object a line" in helped.stdout


def test_a_topic_typo_is_refused_by_every_command(store: Store) -> None:
    """A scheduled `verify --topic evnets` must not report clean forever: every command
    that takes a topic refuses one the metadata does not know, naming the known ones."""
    for command in (("verify",), ("gc",), ("records",), ("segments", "list"), ("partitions",)):
        args = (*command, "evnets") if command == ("records",) else (*command, "--topic", "evnets")
        done = store.run(*args)
        assert done.returncode == 2, (command, done.stdout)
        one_error_line(done, "unknown topic 'evnets'", "known: orders")
        as_json = store.run(*args, "--json")
        assert as_json.returncode == 2
        assert json.loads(as_json.stdout)["error"]["type"] == "RemoteResourceNotFoundError"


def test_records_from_an_offset_past_the_end_is_an_error(store: Store) -> None:
    """Past the end of every chosen partition nothing could be printed: say what the
    archive holds instead of exiting 0 with nothing; a partition it does not reach is
    left out of a read of several."""
    ends = {tp.partition: ms[-1].end_offset for tp, ms in store.segments.items()}
    short, long = sorted(ends, key=ends.__getitem__)
    past = store.run("records", "orders", "--partition", str(short), "--from-offset",
                     str(ends[short] + 1))  # fmt: skip
    one_error_line(past, "offset", "past the end", f"orders-{short}: offsets 0 to {ends[short]}")
    assert past.returncode == 2
    beyond_all = store.run("records", "orders", "--from-offset", str(max(ends.values()) + 5))
    one_error_line(beyond_all, f"orders-{short}: offsets 0 to {ends[short]}",
                   f"orders-{long}: offsets 0 to {ends[long]}")  # fmt: skip
    some = store.run("records", "orders", "--from-offset", str(ends[short] + 1))
    assert some.returncode == 0, some.stderr
    rows = lines(some.stdout)
    assert rows and {r["partition"] for r in rows} == {long}
    assert rows[0]["offset"] == ends[short] + 1


def test_a_listing_with_remote_settings_that_miss_the_segments_is_refused(
    store: Store, tmp_path: Path
) -> None:
    """`segments list` and `partitions` read only the metadata; with [remote] pointing
    elsewhere they used to succeed, and only a later read failed."""
    elsewhere = tmp_path / "not-the-remote-root"
    elsewhere.mkdir()
    for command in (("segments", "list"), ("partitions",)):
        wrong_root = store.run(*command, "--set", f"remote.root={elsewhere}")
        assert wrong_root.returncode == 2, wrong_root.stdout
        one_error_line(wrong_root, str(elsewhere), "[remote]")
        wrong_dir = store.run(*command, "--set", "remote.type=local-tiered-storage",
                              "--set", f"remote.dir={tmp_path / 'no-such-dir'}")  # fmt: skip
        assert wrong_dir.returncode == 2, wrong_dir.stdout
        one_error_line(wrong_dir, "remote.dir", "no-such-dir")
        assert store.run(*command).returncode == 0
