"""The ``RLMM_NO_FAST_PATHS`` switch: every fast path of the core off, for proving the
slow branches equal.

Invariant: read once, when the first module that has a fast path is imported (each
picks its path at import, after a probe); setting ``RLMM_NO_FAST_PATHS`` to anything
but ``""`` or ``"0"`` makes every such module load its plain-Python branch, and the
flags they export (``FAST_BUILD``, ``FAST_UUID``, ``FAST_OBJECTS``) say so.
"""

from __future__ import annotations

import os
from typing import Final

ENV: Final = "RLMM_NO_FAST_PATHS"
ALLOWED: Final = os.environ.get(ENV, "") in ("", "0")

__all__ = ["ALLOWED", "ENV"]
