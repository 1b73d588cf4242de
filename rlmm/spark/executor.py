"""What an executor lacks when its task cannot reach remote storage, said in one line.

Job: ``read()`` runs on executors, which on a cluster share nothing with the driver:
no config file, none of the driver's credentials. When a task fails because this host
lacks something (no AWS credentials in its provider chain, a named profile it does not
have, an endpoint it cannot reach, a local remote-storage root that is not on its
disk), :func:`executor_setting_error` and :func:`missing_local_root` turn that into an
``ExecutorSettingError`` naming the host, the setting and how an executor gets it.

Invariants: only those causes are translated (anything else, data loss included, is
left as it is, so Spark's failOnDataLoss keeps its meaning); a message is one line
and quotes no secret (the options read here never hold one:
``rlmm.spark.planning.remote_options`` removed them on the driver).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rlmm.secrets import SECRETS_FROM
from rlmm.spark.errors import ExecutorSettingError

# How executors on a cluster get S3 credentials (boto3's default chain).
_HOW_CREDENTIALS = (
    "set them in the executors' environment (spark.executorEnv.AWS_ACCESS_KEY_ID and"
    " spark.executorEnv.AWS_SECRET_ACCESS_KEY) or give the host an instance profile;"
    " remote.aws_secret_access_key is never sent to executors"
)


def executor_host() -> str:
    """This host's name, as messages give it."""
    return socket.gethostname()


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and its causes (explicit or implicit), each once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _store(options: Mapping[str, Any]) -> str:
    bucket = options.get("bucket")
    return f"remote.bucket {bucket}" if bucket else f"remote.type {options.get('type', 'local')}"


def missing_local_root(
    options: Mapping[str, Any], host: str | None = None
) -> ExecutorSettingError | None:
    """The error for a local remote-storage path (``remote.root``, LocalTieredStorage's
    ``remote.dir``) that is not a directory on this host, or None. Checked before a task
    reads: every segment would otherwise look deleted (data loss, or silently no rows
    with failOnDataLoss false)."""
    from remote.registry import remote_type

    kind = remote_type(str(options.get("type", "local")))
    for key in kind.paths:
        path = options.get(key)
        if path is not None and not Path(str(path)).is_dir():
            return ExecutorSettingError(
                host or executor_host(),
                f"remote.{key}",
                f"remote.{key} {path} is not a directory on this host: executors read"
                f" {kind.name} remote storage at the driver's path; on a cluster use storage"
                ' every executor reaches (remote.type = "s3") or mount it there on every node',
            )
    return None


def executor_setting_error(
    error: BaseException, options: Mapping[str, Any], host: str | None = None
) -> ExecutorSettingError | None:
    """``error`` (raised by a task reading with remote ``options``) as the setting this
    host lacks, or None when it is about something else."""
    import botocore.exceptions as bx

    host = host or executor_host()
    store = _store(options)
    for cause in _chain(error):
        if isinstance(cause, bx.NoCredentialsError | bx.PartialCredentialsError):
            source = options.get(SECRETS_FROM)
            absent = (
                f" (the config file {source} that holds them on the driver is not on this host)"
                if source is not None and not Path(str(source)).is_file()
                else ""
            )
            found = "" if isinstance(cause, bx.NoCredentialsError) else f" ({_one_line(cause)})"
            return ExecutorSettingError(
                host,
                "AWS credentials",
                f"no AWS credentials for {store}{found}{absent}: {_HOW_CREDENTIALS}",
            )
        if isinstance(cause, bx.ProfileNotFound):
            profile = options.get("profile")
            return ExecutorSettingError(
                host,
                "remote.profile",
                f"remote.profile {profile!r} for {store} is not configured on this host"
                " (~/.aws/config of the executors' user, or AWS_CONFIG_FILE): configure it"
                " there, or drop remote.profile and give executors credentials through their"
                " environment or an instance profile",
            )
        if isinstance(cause, bx.EndpointConnectionError | bx.ConnectTimeoutError):
            endpoint = options.get("endpoint_url")
            what = f"remote.endpoint_url {endpoint}" if endpoint else "S3"
            return ExecutorSettingError(
                host,
                "remote.endpoint_url",
                f"cannot reach {what} for {store} from this host ({_one_line(cause)}):"
                " executors must reach the endpoint the driver uses",
            )
    return None


__all__ = ["executor_host", "executor_setting_error", "missing_local_root"]
