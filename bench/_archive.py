"""Archive fixtures shared by the benchmark scripts: what a copy's metadata carries.

Invariant: ``copy_manifest(i)`` is a deterministic, valid manifest of the shape the
offloader writes (four objects and a timestamp), so benches that fill a cache with it
measure what a sidecar's kept segments cost.
"""

from __future__ import annotations

from remote.manifest import ObjectChecksum, SegmentManifest
from remote.naming import OBJECT_KINDS


def copy_manifest(i: int) -> bytes:
    """The custom metadata a copy of segment ``i`` carries (four objects, a timestamp)."""
    objects = {
        kind: ObjectChecksum(1 << 20 if kind is None else 4096 + i % 97, i * 2654435761 % (1 << 32))
        for kind in OBJECT_KINDS[:4]
    }
    return SegmentManifest(objects, 1_700_000_000_000 + i).encode()
