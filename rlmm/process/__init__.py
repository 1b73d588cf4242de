"""The process's own housekeeping, for a long-running rlmm process (the ``rlmm offload``
sidecar): its long-lived heap out of the garbage collector's walks (``long_lived``), its
native memory bounded under glibc's malloc (``native_memory``), and what both cost, as
Prometheus counters (``runtime_costs``).

Invariant: none of it offloads, serves or reads anything; it imports nothing of the
project (a leaf under the outer layer, which owns the process), touches only
process-wide state of the interpreter and the C library, and every change it makes is
undone or harmless at stop (``LongLivedHeap.thaw``, ``RuntimeCosts.close``).
"""
