"""Backends that other packages install: the remote-store and event-log registries find
them by entry point (groups ``rlmm.remote_stores`` and ``rlmm.event_logs``), rlmm's
config checks their settings as it checks its own, and rlmm reads and writes through
them. The package is tests/example_backends, installed here as pip would leave it
for importlib.metadata: a ``.dist-info`` directory (its entry points taken from the
package's pyproject.toml) on a sys.path entry, beside the package's code.
"""

from __future__ import annotations

import asyncio
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from eventlog.file import FileEventLog
from eventlog.registry import backend, known_options
from remote.layouts.rlmm_layout import RlmmLayout
from remote.local import LocalRemoteStorageManager
from remote.registry import check_remote_options, installed_types, remote_type
from remote.storage import RemoteStorageManager
from rlmm.config import load_config
from rlmm.errors import ConfigError
from rlmm.factory import open_event_log, open_remote_layout, open_remote_storage
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import RemoteLogSegmentMetadata
from rlmm.ops.describe import segment_fields
from tests.rlmm.archive.archive_data import copy_segment
from tests.rlmm.cli.store import run_cli, with_manager, write_partition

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "example_backends"


def install(site: Path, name: str, version: str, groups: Mapping[str, Mapping[str, str]]) -> None:
    """What installing a distribution leaves for importlib.metadata: its metadata and its
    entry points, in a ``.dist-info`` directory of a sys.path entry."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items()) + "\n"
            for group, points in groups.items()
        )
    )


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """tests/example_backends installed in this process; the environment that installs
    it in a child process."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    site = tmp_path / "site-packages"
    install(site, project["name"], project["version"], project["entry-points"])
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(site))
    path = os.pathsep.join(filter(None, (str(site), str(EXAMPLE), os.environ.get("PYTHONPATH"))))
    return {"PYTHONPATH": path}


@pytest.fixture
def odd(installed: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second distribution whose entry points do not load, name the wrong kind of
    object, or take a built-in type's name."""
    site = tmp_path / "odd-site-packages"
    install(
        site,
        "rlmm-odd-backends",
        "0.2",
        {
            "rlmm.remote_stores": {
                "broken": "rlmm_no_such_module:Store",
                "wrong": "rlmm_example_backends:JournalEventLog",
                "local": "rlmm_example_backends:MirrorRemoteStorageManager",
            },
            "rlmm.event_logs": {
                "broken": "rlmm_example_backends:NoSuchLog",
                "wrong": "rlmm_example_backends:MirrorRemoteStorageManager",
                "file": "rlmm_example_backends:JournalEventLog",
            },
        },
    )
    monkeypatch.syspath_prepend(str(site))


def write_config(path: Path, data_dir: Path, *, remote: str = "", eventlog: str = "") -> Path:
    path.write_text(
        f'data_dir = "{data_dir}"\n'
        "[eventlog]\n"
        'type = "journal"\n'
        f'dir = "{data_dir / "journal"}"\n'
        "partitions = 4\n"
        'fsync = "interval"\n'
        f"{eventlog}"
        "[remote]\n"
        'type = "mirror"\n'
        f'root = "{data_dir / "mirror"}"\n'
        'label = "backup"\n'
        f"{remote}"
    )
    return path


def test_the_registries_find_the_installed_types(installed: dict[str, str]) -> None:
    from rlmm_example_backends import JournalEventLog, MirrorRemoteStorageManager

    assert "mirror" in installed_types()
    mirror = remote_type("mirror")
    assert not mirror.read_only
    assert mirror.storage_manager_class() is MirrorRemoteStorageManager
    assert mirror.layout_class() is RlmmLayout  # rlmm's layout, which it writes
    assert mirror.known_options() == {"root", "fsync", "label"}  # its constructor's
    assert backend("journal") is JournalEventLog
    assert known_options("journal") == known_options("file")


def test_unknown_types_name_the_group_and_the_installed_ones(installed: dict[str, str]) -> None:
    with pytest.raises(
        ConfigError,
        match=r"unknown remote\.type 'nfs' \(expected one of \('local', .*'aiven-s3'\);"
        r" installed as entry points of rlmm\.remote_stores: mirror\)",
    ):
        check_remote_options({"type": "nfs"})
    with pytest.raises(
        ConfigError,
        match=r"eventlog\.type = 'zk': unknown event log type 'zk' \(built in: file, kafka,"
        r" memory; installed as entry points of rlmm\.event_logs: journal\)",
    ):
        load_config(overrides={"eventlog.type": "zk"}, env={})


@pytest.mark.usefixtures("odd")
def test_an_entry_point_that_does_not_load_names_its_distribution_and_the_error() -> None:
    odd = "entry point of {} in rlmm-odd-backends 0.2"
    with pytest.raises(ConfigError) as remote_error:
        remote_type("broken")
    assert str(remote_error.value) == (
        f"remote.type = 'broken' (rlmm_no_such_module:Store, {odd.format('rlmm.remote_stores')})"
        " failed to load: ModuleNotFoundError: No module named 'rlmm_no_such_module'"
    )
    with pytest.raises(ConfigError) as config_error:
        load_config(overrides={"eventlog.type": "broken"}, env={})
    assert str(config_error.value).startswith(
        "eventlog.type = 'broken': event log type 'broken' (rlmm_example_backends:NoSuchLog,"
        f" {odd.format('rlmm.event_logs')}) failed to load: AttributeError: "
    )
    with pytest.raises(ConfigError, match="neither a RemoteStorageManager subclass nor"):
        remote_type("wrong")
    with pytest.raises(ConfigError, match=r"not an eventlog\.EventLog subclass"):
        load_config(overrides={"eventlog.type": "wrong"}, env={})
    # A built-in type keeps its name: an installed one of the same name is not used.
    assert remote_type("local").storage_manager_class() is LocalRemoteStorageManager
    assert backend("file") is FileEventLog


def test_the_config_checks_an_installed_type_s_settings(
    installed: dict[str, str], tmp_path: Path
) -> None:
    from rlmm_example_backends import JournalEventLog, MirrorRemoteStorageManager

    config = load_config(write_config(tmp_path / "rlmm.toml", tmp_path / "data"), env={})
    with open_remote_storage(config) as rsm:
        assert isinstance(rsm, MirrorRemoteStorageManager) and rsm.label == "backup"
    assert isinstance(open_event_log(config), JournalEventLog)
    for remote, eventlog, message in (
        (
            'labl = "x"\n',
            "",
            "unknown setting remote.labl for remote.type = 'mirror'; known: fsync, label, root",
        ),
        ("bucket = 'b'\n", "", r"remote\.bucket .*\(a setting of remote\.type = 's3'\)"),
        ("", "", None),
        ("", "topic = 't'\n", r"eventlog\.topic .*\(a setting of eventlog\.type = 'kafka'\)"),
        ("", "fsynk = 'always'\n", "unknown setting eventlog.fsynk for eventlog.type = 'journal'"),
    ):
        path = write_config(
            tmp_path / "bad.toml", tmp_path / "data", remote=remote, eventlog=eventlog
        )
        if message is None:
            load_config(path, env={})
            continue
        with pytest.raises(ConfigError, match=message):
            load_config(path, env={})
    with pytest.raises(ConfigError, match=r"remote\.label must be str, got 3"):
        load_config(tmp_path / "rlmm.toml", overrides={"remote.label": 3}, env={})


def test_rlmm_reads_what_it_wrote_through_installed_backends(
    installed: dict[str, str], tmp_path: Path
) -> None:
    """The manager writes through both installed backends; `rlmm segments list` and
    `rlmm verify`, in another process, read through them."""
    path = write_config(tmp_path / "rlmm.toml", tmp_path / "data")
    config = load_config(path, env={})
    pdirs = [write_partition(tmp_path / "logs", "orders", p, n) for p, n in ((0, 3), (1, 2))]
    tps = [pdir.topic_id_partition() for pdir in pdirs]

    async def copy_all(
        manager: TopicBasedRemoteLogMetadataManager, rsm: RemoteStorageManager
    ) -> list[RemoteLogSegmentMetadata]:
        return [
            await copy_segment(manager, rsm, tp, seg)
            for tp, pdir in zip(tps, pdirs, strict=True)
            for seg in pdir.segments()[:-1]
        ]

    copied = asyncio.run(with_manager(config, tps, copy_all))
    assert {m.topic_id_partition for m in copied} == set(tps) and len(copied) > len(tps)
    assert any((tmp_path / "data" / "mirror").rglob("*.log"))  # the mirror's root
    assert any((tmp_path / "data" / "journal").rglob("*.log"))  # the journal's directory

    listed = run_cli("segments", "list", "--json", "--config", str(path), env=installed)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["segments"]
    for row in rows:
        row.pop("serves")
    assert rows == [segment_fields(m) for m in copied]
    verified = run_cli("verify", "--config", str(path), env=installed)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with open_remote_layout(config) as layout:
        assert isinstance(layout, RlmmLayout) and layout.type_name == "mirror"
