"""The Python side of rlmm's Kafka broker plugin: ``rlmm serve``.

Apache Kafka loads two thin JVM classes (``io.rlmm.kafka.RlmmRemoteStorageManager``
and ``io.rlmm.kafka.RlmmRemoteLogMetadataManager``, built from ``bridge/``) as its
RemoteStorageManager and RemoteLogMetadataManager; each forwards every call over a
local socket to one ``rlmm serve`` process per broker, which this package is.

Invariant: every tiering rule the plugin applies lives here or below (the manager, the
stores, the layouts); the JVM side only translates calls, supervises this process and
maps errors. Modules: ``protocol`` (frames and values on the socket), ``broker_settings``
(the broker's properties over the TOML), ``storage_calls`` (the RSM's calls),
``metadata_calls`` (the RLMM's calls), ``server`` (the socket, the process's life).
"""
