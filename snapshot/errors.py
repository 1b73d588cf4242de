"""Errors of the snapshot package: every one derives from SnapshotError.

Invariant: messages name the file (or ``<bytes>`` for in-memory input) and what is
wrong with it; third-party errors (msgpack, OS) are kept as ``__cause__``.
"""

from __future__ import annotations


class SnapshotError(Exception):
    """Base of every snapshot error."""

    retriable: bool = False


class SnapshotInvalidError(SnapshotError, ValueError):
    """A Snapshot built with fields of the wrong type or range (the message names the field)."""


class SnapshotEncodeError(SnapshotError, ValueError):
    """The caller's state cannot be serialised with msgpack (unsupported type, int too big)."""


class SnapshotCorruptError(SnapshotError):
    """Stored bytes are not a valid snapshot: truncated, bad magic, CRC mismatch, bad body.

    ``source`` is the file (or ``<bytes>``) and ``reason`` the short description of the
    defect, so callers can log them separately.
    """

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"corrupt snapshot {source}: {reason}")
        self.source = source
        self.reason = reason


class SnapshotVersionError(SnapshotError):
    """A valid frame whose format version this rlmm does not know (written by a newer rlmm)."""

    def __init__(self, source: str, version: int, supported: int) -> None:
        super().__init__(
            f"snapshot {source} has format version {version}, this rlmm reads up to "
            f"version {supported} (written by a newer rlmm?)"
        )
        self.source = source
        self.version = version
        self.supported = supported


class SnapshotStoreError(SnapshotError):
    """The snapshot directory is unusable (not a directory, not writable) or misconfigured."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class SnapshotConfigError(SnapshotStoreError, ValueError):
    """An invalid store setting such as ``keep < 1`` (the message names it)."""
