"""Builds the configured parts (event log, remote storage, snapshot store, manager).

Invariant: the only place where configuration turns into objects: each part's type is
looked up in its package's registry (``eventlog.registry``, ``remote.registry``,
``snapshot.registry``), and clients shared between parts (the S3 snapshot store's
boto3 client, set up as the ``[remote]`` bucket's) are built here; backend
configuration errors come out as rlmm.errors.ConfigError naming the setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eventlog import EventLog, EventLogConfigError
from eventlog.registry import load_event_log
from remote.layouts import RemoteLayout
from remote.registry import load_remote_layout, load_remote_storage_manager
from remote.side_index import SideIndex, is_s3_location
from remote.storage import RemoteStorageManager
from remote.topic_configs import TopicConfigStore
from rlmm.config import RlmmConfig, flatten_table
from rlmm.errors import ConfigError
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.secrets import SECRETS_FROM, is_secret
from rlmm.snapshotting import SnapshotPolicy
from snapshot import SnapshotError, SnapshotStore, load_snapshot_store


def open_event_log(config: RlmmConfig) -> EventLog:
    """The configured event log (not started: ``await log.start()`` or ``async with``)."""
    options: dict[str, Any] = config.event_log_options()
    try:
        return load_event_log(options)
    except (EventLogConfigError, TypeError) as e:
        settings = sorted(k for k in options if k != "properties")
        raise ConfigError(f"bad event log settings {settings}: {e}") from e


def open_remote_storage(config: RlmmConfig) -> RemoteStorageManager:
    """The RemoteStorageManager that copies segments (rlmm's own layout: local or s3)."""
    return load_remote_storage_manager(config.remote_options())


def open_remote_layout(config: RlmmConfig) -> RemoteLayout:
    """The read side of the configured remote tier (any layout)."""
    return load_remote_layout(config.remote_options())


def remote_layout_from_options(options: Mapping[str, Any]) -> RemoteLayout:
    """The read side of ``[remote]`` options as a Spark input partition carries them:
    options that left their secrets behind get them again from the config file they
    name, when this process can read it (else the process's own credentials apply,
    the access key id that came without its secret included)."""
    out = dict(options)
    source = out.pop(SECRETS_FROM, None)
    if source is not None and Path(source).is_file():
        out.update(_file_remote_secrets(Path(source)))
    if "aws_access_key_id" in out and "aws_secret_access_key" not in out:
        # The key id travelled, its secret did not (this host lacks the file): a key id
        # alone would make boto3 fail on "partial credentials" instead of trying this
        # host's own chain (environment, profile, instance role).
        del out["aws_access_key_id"]
    return load_remote_layout(out)


def open_side_index(location: str, remote_options: Mapping[str, Any]) -> SideIndex:
    """rlmm's side index at ``location`` (a directory or ``s3://bucket/prefix``); an S3
    one gets a boto3 client set up as the ``[remote]`` bucket's (endpoint, region,
    retries; credentials from the process's own chain when the options carry none)."""
    if not is_s3_location(location):
        return SideIndex(location)
    from remote.s3 import make_s3_client

    return SideIndex(location, s3_client=make_s3_client(remote_options))


def open_topic_config_store(config: RlmmConfig) -> TopicConfigStore | None:
    """Where topics' configs are kept (``remote.topic_configs``): the ``[remote]`` store of
    rlmm's own layout (its root, or its bucket and prefix, with its encryption settings);
    None for a Kafka cluster's own tier, which rlmm reads but never writes."""
    remote = config.remote_options()
    kind = remote.get("type", "local")
    if kind == "local":
        return TopicConfigStore(Path(remote["root"]), fsync=bool(remote.get("fsync", True)))
    if kind != "s3":
        return None
    from remote.s3 import encryption_args, make_s3_client

    return TopicConfigStore(
        s3_client=make_s3_client(remote),
        bucket=str(remote["bucket"]),
        prefix=str(remote.get("prefix", "")),
        object_args=encryption_args(
            remote.get("sse"), remote.get("sse_kms_key_id"), remote.get("bucket_key_enabled", False)
        ),
    )


def _file_remote_secrets(path: Path) -> dict[str, Any]:
    """The secret ``[remote]`` settings of the TOML file at ``path``. Read as they are,
    not through ``load_config``: the file may hold only those, the other settings
    (``remote.type`` among them) having come from Spark options or conf."""
    import tomllib

    try:
        with path.open("rb") as f:
            remote = tomllib.load(f).get("remote", {})
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
    return {k: v for k, v in flatten_table(remote).items() if is_secret(k)}


def snapshot_store_options(config: RlmmConfig, *, read_only: bool = False) -> dict[str, Any]:
    """Options for ``snapshot.load_snapshot_store`` from ``[snapshot]`` (and ``[remote]``).

    For ``store = "s3"`` this builds a boto3 client set up as the ``[remote]`` bucket's
    own (closed with the store).
    """
    keep = int(config.snapshot["keep"])
    if config.snapshot.get("store", "local") == "local":
        return {
            "type": "local",
            "directory": config.snapshot_dir(),
            "keep": keep,
            "read_only": read_only,
        }
    remote = config.remote_options()
    if remote.get("type") != "s3" or not remote.get("bucket"):
        raise ConfigError("snapshot.store = 's3' needs remote.type = 's3' and remote.bucket")
    from remote.s3 import encryption_args, make_s3_client

    return {
        "type": "s3",
        "object_args": encryption_args(
            remote.get("sse"), remote.get("sse_kms_key_id"), remote.get("bucket_key_enabled", False)
        ),
        "client": make_s3_client(remote),
        "bucket": remote["bucket"],
        "prefix": str(remote.get("prefix", "")),
        "owner": config.snapshot_owner(),
        "keep": keep,
        "read_only": read_only,
        "close_client": True,
    }


def snapshot_policy(config: RlmmConfig) -> SnapshotPolicy | None:
    """The configured policy, or None when snapshots are disabled."""
    if not config.snapshot["enabled"]:
        return None
    try:
        return SnapshotPolicy(
            config.snapshot_dir(),
            every_events=int(config.snapshot["every_events"]),
            interval_s=float(config.snapshot["interval_s"]),
            keep=int(config.snapshot["keep"]),
            store=snapshot_store_options(config),
            owner=config.snapshot_owner(),
            retention=bool(config.snapshot.get("retention", True)),
        )
    except SnapshotError as e:
        raise ConfigError(f"bad [snapshot] settings: {e}") from e


def open_snapshot_source(config: RlmmConfig) -> SnapshotStore:
    """The configured snapshot store, read-only (``close()`` it when done)."""
    try:
        return load_snapshot_store(snapshot_store_options(config, read_only=True))
    except SnapshotError as e:
        raise ConfigError(f"bad [snapshot] settings: {e}") from e


def create_manager(
    config: RlmmConfig, event_log: EventLog, *, close_event_log: bool = True
) -> TopicBasedRemoteLogMetadataManager:
    """A manager over ``event_log`` with the configured snapshot policy (not started)."""
    return TopicBasedRemoteLogMetadataManager(
        event_log,
        write_timeout_s=float(config.manager["write_timeout_s"]),
        snapshot_policy=snapshot_policy(config),
        close_event_log=close_event_log,
    )


__all__ = [
    "create_manager",
    "open_event_log",
    "open_remote_layout",
    "open_remote_storage",
    "open_side_index",
    "open_snapshot_source",
    "open_topic_config_store",
    "remote_layout_from_options",
    "snapshot_policy",
    "snapshot_store_options",
]
