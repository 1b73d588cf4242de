"""Example third-party rlmm backends, installed through entry points (docs/extending.md).

``MirrorRemoteStorageManager`` (``[remote] type = "mirror"``) is rlmm's local-directory
store under another type name, with one setting of its own, ``label``;
``JournalEventLog`` (``[eventlog] type = "journal"``) is the file event log under
another name. Invariant: each declares its settings as rlmm's own backends do, by its
constructor's arguments, so rlmm's config check knows them without this package
telling it anything else.
"""

from __future__ import annotations

from pathlib import Path

from eventlog.file import FileEventLog
from remote.local import LocalRemoteStorageManager


class MirrorRemoteStorageManager(LocalRemoteStorageManager):
    """A local directory store whose ``label`` names it in its repr."""

    def __init__(self, root: Path, *, fsync: bool = True, label: str = "mirror") -> None:
        super().__init__(root, fsync=fsync)
        self.label = label

    def __repr__(self) -> str:
        return f"MirrorRemoteStorageManager({self.label!r}, {super().__repr__()})"


class JournalEventLog(FileEventLog):
    """The file event log, under another type name."""


__all__ = ["JournalEventLog", "MirrorRemoteStorageManager"]
