"""Retention of a file log: the owners' claims on disk, and deleting whole segments.

Layout: ``<log dir>/retention/<owner>.json``, one file per registered owner::

    {"version": 1, "owner": "broker-0", "updated_ms": ...,
     "floors": {"<partition>": <offset>, ...},   # below it, this owner needs nothing
     "start_from": <any JSON: where this owner would start instead (its snapshots)>}

Each file is written atomically (temp file, fsync, rename, fsync of the dir), by the
owner, from any process. The log deletes only whole segments that lie entirely below
``min(claim.floors.get(p, 0) for every claim)``.

Invariant (safe by construction): a partition missing from a claim counts as floor 0,
a claim file that cannot be read or parsed holds every partition at 0, and no claim
at all means floor 0: whatever is unknown keeps the log, never loses it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventlog._segment import INDEX_SUFFIX, Segment, fsync_dir, list_segments
from eventlog.errors import EventLogConfigError, EventLogStorageError

logger = logging.getLogger(__name__)

RETENTION_DIR = "retention"
CLAIM_VERSION = 1
_OWNER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SUFFIX = ".json"


def check_owner(owner: object) -> str:
    if not isinstance(owner, str) or not _OWNER_RE.match(owner):
        raise EventLogConfigError(
            f"retention owner {owner!r} must be 1-128 characters of letters, digits, "
            "'.', '_' or '-' (starting with a letter or digit)"
        )
    return owner


@dataclass(frozen=True)
class RetentionClaim:
    """One owner's claim: per partition, the offset below which it needs nothing."""

    owner: str
    floors: Mapping[int, int]
    start_from: Any = None
    updated_ms: int = 0


@dataclass
class ClaimSet:
    """Every claim on disk, plus the files that could not be understood."""

    claims: dict[str, RetentionClaim] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def floor(self, partition: int) -> int:
        """The offset below which no registered owner needs ``partition`` (0 if unsure)."""
        if self.problems or not self.claims:
            return 0
        return min(claim.floors.get(partition, 0) for claim in self.claims.values())

    def start_from(self) -> dict[str, Any]:
        return {owner: claim.start_from for owner, claim in sorted(self.claims.items())}


class RetentionRegistry:
    """The claims directory of one file log."""

    def __init__(self, log_dir: Path) -> None:
        self.dir = log_dir / RETENTION_DIR

    def path_of(self, owner: str) -> Path:
        return self.dir / f"{check_owner(owner)}{_SUFFIX}"

    def register(
        self, owner: str, floors: Mapping[int, int], start_from: Any = None
    ) -> RetentionClaim:
        """Atomically replace ``owner``'s claim (creating the directory if needed)."""
        path = self.path_of(owner)
        clean: dict[int, int] = {}
        for p, offset in floors.items():
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise EventLogConfigError(f"retention claim of {owner}: bad partition {p!r}")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise EventLogConfigError(
                    f"retention claim of {owner}: partition {p} floor must be an int >= 0,"
                    f" got {offset!r}"
                )
            clean[p] = offset
        claim = RetentionClaim(owner, clean, start_from, int(time.time() * 1000))
        body = {
            "version": CLAIM_VERSION,
            "owner": owner,
            "updated_ms": claim.updated_ms,
            "floors": {str(p): o for p, o in sorted(clean.items())},
            "start_from": start_from,
        }
        try:
            data = json.dumps(body, sort_keys=True).encode()
        except (TypeError, ValueError) as e:
            raise EventLogConfigError(
                f"retention claim of {owner}: start_from is not JSON: {e}"
            ) from e
        tmp = self.dir / f".{owner}.{os.getpid()}.tmp"
        try:
            self.dir.mkdir(exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            fsync_dir(self.dir)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise EventLogStorageError(f"cannot write retention claim {path}: {e}") from e
        return claim

    def unregister(self, owner: str) -> bool:
        """Drop ``owner``'s claim (it no longer holds the log back); False if it had none."""
        path = self.path_of(owner)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise EventLogStorageError(f"cannot remove retention claim {path}: {e}") from e
        fsync_dir(self.dir)
        return True

    def load(self) -> ClaimSet:
        """Every claim on disk; an unreadable one is a problem (holds the whole log)."""
        found = ClaimSet()
        try:
            names = sorted(entry.name for entry in os.scandir(self.dir))
        except FileNotFoundError:
            return found
        except OSError as e:
            found.problems.append(f"{self.dir}: {e}")
            return found
        for name in names:
            if not name.endswith(_SUFFIX) or name.startswith("."):
                continue
            path = self.dir / name
            try:
                claim = self._parse(path, json.loads(path.read_bytes()))
            except FileNotFoundError:
                continue  # unregistered meanwhile
            except (OSError, ValueError, TypeError, KeyError) as e:
                logger.warning(
                    "retention claim %s is unusable (holding the whole log): %s", path, e
                )
                found.problems.append(f"{path}: {e}")
                continue
            found.claims[claim.owner] = claim
        return found

    @staticmethod
    def _parse(path: Path, body: Any) -> RetentionClaim:
        if not isinstance(body, dict) or body.get("version") != CLAIM_VERSION:
            raise ValueError(f"not a version {CLAIM_VERSION} claim")
        owner = check_owner(body["owner"])
        if path.name != f"{owner}{_SUFFIX}":
            raise ValueError(f"names owner {owner!r}, not its file name")
        floors: dict[int, int] = {}
        for key, offset in body["floors"].items():
            p = int(key)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0 or p < 0:
                raise ValueError(f"bad floor {key!r}: {offset!r}")
            floors[p] = offset
        return RetentionClaim(owner, floors, body.get("start_from"), int(body["updated_ms"]))


# -- deleting segments (worker threads) ------------------------------------------


def remove_orphan_indexes(part_dir: Path, bases: set[int]) -> None:
    """Drop ``.index`` files whose ``.log`` is gone (a crash between the two unlinks)."""
    for path in part_dir.glob(f"*{INDEX_SUFFIX}"):
        stem = path.name.removesuffix(INDEX_SUFFIX)
        if len(stem) == 20 and stem.isdigit() and int(stem) not in bases:
            logger.info("removing orphan index %s (its segment was deleted)", path)
            path.unlink(missing_ok=True)


def delete_segments(part_dir: Path, doomed: list[Segment]) -> int:
    """Unlink whole segments oldest first (so a crash leaves a contiguous rest); bytes freed."""
    freed = 0
    for seg in doomed:
        with contextlib.suppress(FileNotFoundError):
            freed += seg.path.stat().st_size
        seg.path.unlink(missing_ok=True)
        seg.index_path.unlink(missing_ok=True)
    fsync_dir(part_dir)
    return freed


def first_base(part_dir: Path) -> int | None:
    listing = list_segments(part_dir) if part_dir.is_dir() else []
    return listing[0][0] if listing else None
