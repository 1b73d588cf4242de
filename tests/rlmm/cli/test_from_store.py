"""After a disaster: the metadata log is deleted, and every reading command reads the
archive from the remote store alone with ``--from-store``, giving what it gave from the
metadata before (what only the metadata log knows left out: the writing broker, the
event times, the custom metadata and the events themselves). Without the flag, each
names the event log, the config file and the remedy; ``gc`` refuses the flag. And a
metadata log that lists nothing beside a store of segments is a refusal naming the
store and its object count, never an empty success (``gc`` would have called every
object garbage). Run as a user runs them (new processes)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rlmm.factory import open_event_log
from tests.rlmm.cli.store import Store, build_store, sid

# What only the metadata log knows: the store alone cannot give them back.
METADATA_ONLY = ("event_timestamp_ms", "broker_id", "custom_metadata", "smallest_timestamp_ms")
READS = (
    ("segments", "list"),
    ("partitions",),
    ("records", "orders"),
    ("verify", "--deep"),
)


def without(fields: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in names}


def reading(store: Store, *args: str) -> Any:
    """What one reading command prints, as comparable data (exit 0 asserted)."""
    done = store.run(*args, "--json")
    assert done.returncode == 0, done.stderr
    if args[0] == "records":
        return [json.loads(line) for line in done.stdout.splitlines()]
    out = json.loads(done.stdout)
    if args[0] == "segments" and args[1] == "list":
        return [without(s, *METADATA_ONLY) for s in out["segments"]]
    if args[0] == "segments":
        # what each object was recorded as is the metadata's (rlmm's manifest)
        stored = sorted(
            (o["name"], o["kind"], o["stored_size"], o["last_modified_ms"]) for o in out["objects"]
        )
        return without(out["segment"], *METADATA_ONLY), stored
    if args[0] == "partitions":
        return [without(p, "newest_record_age_s") for p in out["partitions"]]
    # verify: deep, the store alone has no recorded CRC-32C of an object (the manifest
    # is in the metadata) and reads the logs only (each batch's CRC)
    return without(out, "bytes_read")


def lose_the_metadata(store: Store, keep_snapshots: bool) -> None:
    """The disaster: the metadata log is gone (and rlmm's snapshots, unless kept)."""
    shutil.rmtree(store.config.event_log_options()["dir"])
    if not keep_snapshots:
        shutil.rmtree(store.config.snapshot_dir())


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


@pytest.mark.parametrize(
    ("remote", "keep_snapshots"),
    [
        ("local", False),
        ("local", True),
        pytest.param("s3", False, marks=pytest.mark.s3),
    ],
    ids=["local-objects-alone", "local-snapshots-survive", "s3-objects-alone"],
)
def test_every_reader_reads_the_store_alone_as_it_read_the_metadata(
    request: pytest.FixtureRequest, tmp_path: Path, remote: str, keep_snapshots: bool
) -> None:
    endpoint = request.getfixturevalue("s3_endpoint") if remote == "s3" else None
    store = build_store(tmp_path, endpoint)
    one = store.segments[next(iter(store.segments))][3]
    show = ("segments", "show", sid(one))
    before = {args: reading(store, *args) for args in (*READS, show)}
    assert len(before[("segments", "list")]) == sum(map(len, store.segments.values()))
    assert len(before[("records", "orders")]) > 1000

    lose_the_metadata(store, keep_snapshots)
    for args in (*READS, show):
        assert reading(store, *args, "--from-store") == before[args], args
    shown = json.loads(store.run(*show, "--from-store", "--json").stdout)
    assert shown["events"] == []  # no metadata log to read them from
    deep = json.loads(store.run("verify", "--deep", "--from-store", "--json").stdout)
    assert deep["bytes_read"] == sum(s["segment_size_in_bytes"] for s in before[READS[0]])
    # the text table too, and one topic of the store alone
    table = store.run("partitions", "--topic", "orders", "--from-store")
    assert table.returncode == 0, table.stderr
    rows = [line.split()[:3] for line in table.stdout.splitlines() if line.startswith("orders")]
    assert rows == [
        ["orders", str(tp.partition), str(len(ms))] for tp, ms in store.segments.items()
    ]
    unknown = one_line_error(store.run("partitions", "--topic", "ordres", "--from-store"))
    assert "unknown topic 'ordres'" in unknown and "known: orders" in unknown


def test_without_the_flag_each_reader_names_the_log_the_config_and_the_remedy(
    tmp_path: Path,
) -> None:
    """Before: `cannot read the remote log metadata from FileEventLog(...): no event log
    in ... (missing eventlog.json)`, naming neither the config nor a way out."""
    store = build_store(tmp_path)
    lose_the_metadata(store, keep_snapshots=False)
    log_dir = store.config.event_log_options()["dir"]
    for args in (
        *READS,
        ("segments", "show", sid(store.segments[next(iter(store.segments))][0])),
        ("restore", "--topic", "orders", "--bootstrap-server", "127.0.0.1:1", "--dry-run"),
    ):
        line = one_line_error(store.run(*args))
        assert line.startswith("error: cannot read the remote log metadata from FileEventLog("), (
            line
        )
        assert str(log_dir) in line and "missing eventlog.json" in line, line
        assert f"[eventlog] of {store.config_path}" in line, line
        assert line.rstrip().endswith(
            "to read the archive from the remote store alone: --from-store"
        ), line
    # `events` is the metadata log itself: it names the readers that can do without it
    events = one_line_error(store.run("events"))
    assert f"event log directory {log_dir} does not exist" in events, events
    assert "partitions, records, verify and restore take --from-store" in events, events
    gc = one_line_error(store.run("gc"))
    assert gc.rstrip().endswith("take --from-store (gc needs the metadata log)"), gc


def test_gc_refuses_the_store_alone(tmp_path: Path) -> None:
    """gc deletes what the metadata does not name: never against a rebuilt view, even
    with the metadata log at hand (the refusal comes before anything is read)."""
    store = build_store(tmp_path)
    root = Path(store.config.remote_options()["root"])
    objects = sorted(p for p in root.rglob("*") if p.is_file())
    for args in (("gc", "--from-store"), ("gc", "--apply", "--safety-window", "0", "--from-store")):
        line = one_line_error(store.run(*args))
        assert "--from-store is refused: gc deletes what the metadata does not name" in line
        assert "`rlmm verify --from-store` checks the archive without it" in line
    assert sorted(p for p in root.rglob("*") if p.is_file()) == objects


def empty_metadata_log(store: Store) -> None:
    """A metadata log that lists nothing (a new cluster's, or the wrong one), with no
    snapshot: the store beside it keeps every segment."""
    lose_the_metadata(store, keep_snapshots=False)

    async def create() -> None:
        log = open_event_log(store.config)
        await log.start()
        await log.close()

    asyncio.run(create())


def test_an_empty_metadata_beside_a_store_of_segments_is_refused(tmp_path: Path) -> None:
    """Before: `rlmm partitions` printed an empty table, `verify` said OK and `gc` (with
    the objects older than its safety window) would have deleted the whole archive;
    all exited 0."""
    store = build_store(tmp_path)
    empty_metadata_log(store)
    root = Path(store.config.remote_options()["root"])
    objects = sorted(p for p in root.rglob("*") if p.is_file())
    copies = sum(map(len, store.segments.values()))
    for args in (
        ("partitions",),
        ("segments", "list"),
        ("records", "orders"),
        ("verify",),
        ("gc", "--apply", "--safety-window", "0"),
        ("restore", "--topic", "orders", "--bootstrap-server", "127.0.0.1:1", "--dry-run"),
    ):
        line = one_line_error(store.run(*args))
        assert "the remote log metadata ([eventlog] of" in line and "lists no segment" in line
        assert f"LocalRemoteStorageManager(root={str(root)!r}) holds" in line, line
        assert f"holds {len(objects)} objects of {copies} segment copies" in line, line
        assert "--from-store" in line, line
    assert sorted(p for p in root.rglob("*") if p.is_file()) == objects  # gc deleted nothing
    assert store.run("partitions", "--from-store").returncode == 0


def test_a_store_of_copies_none_of_which_is_whole_is_refused_from_the_store(
    tmp_path: Path,
) -> None:
    """Read alone, a store whose every copy lacks its offset index lists nothing: that
    is a finding (how many objects, why the copies were left out), not an empty table."""
    store = build_store(tmp_path)
    lose_the_metadata(store, keep_snapshots=False)
    root = Path(store.config.remote_options()["root"])
    for index in root.rglob("*.index"):
        index.unlink()
    objects = sum(1 for p in root.rglob("*") if p.is_file())
    line = one_line_error(store.run("partitions", "--from-store"))
    assert f"holds {objects} objects of" in line, line
    assert "none of them is a finished copy" in line and "incomplete copy" in line, line
    assert "to read the archive from the remote store alone" not in line  # it was


def test_a_missing_local_root_is_named_and_not_created(tmp_path: Path) -> None:
    store = build_store(tmp_path)
    wrong = tmp_path / "not-the-store"
    line = one_line_error(store.run("partitions", "--from-store", "--set", f"remote.root={wrong}"))
    assert f"[remote] root {str(wrong)!r} does not exist" in line, line
    assert not wrong.exists()
