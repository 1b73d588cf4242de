"""Errors of ``rlmm serve``.

Invariant: every error derives from rlmm.errors.RemoteStorageError through PluginError,
and carries the one line the bridge logs in the broker's log (naming the method, the
socket or the version concerned).
"""

from __future__ import annotations

from rlmm.errors import RemoteStorageError


class PluginError(RemoteStorageError):
    """Base of the plugin's own errors."""


class ProtocolError(PluginError):
    """A frame or a call that breaks the bridge's protocol (size, type, unknown method)."""


class VersionMismatchError(PluginError):
    """The bridge's jar and this ``rlmm serve`` are of different releases or protocols."""


class AlreadyServingError(PluginError):
    """Another ``rlmm serve`` holds the socket (exit code 3: the bridge then attaches)."""


__all__ = ["AlreadyServingError", "PluginError", "ProtocolError", "VersionMismatchError"]
