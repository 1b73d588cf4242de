"""The Kafka client layer: what any aiokafka client of a Kafka cluster needs besides
the event log itself, shared by the ``kafka`` backend (``eventlog.kafka``) and by rlmm's
offloader and restore, which talk to the same cluster with clients of their own.

Here: the clients' connection settings from Kafka's client property names
(``client_settings_from_properties``, with ``ClientSecurity``, the security part), and
which brokers a process could not reach (``BrokerReachability``, ``UNREACHABLE``,
``address_of``). A module outside ``eventlog`` that needs a Kafka client imports this
one, never the backend module (tests/test_layering.py holds that).

Invariants: connection settings are checked as the event log's own are, and a property
that is not a connection setting is an EventLogConfigError naming it, never dropped.
Brokers: a request sent to one broker (a partition leader's end offsets, the sidecar's
leadership question) fails with aiokafka's NodeNotReadyError or KafkaConnectionError
while that broker is down, once per attempt until the cluster has moved its partitions,
so a failover showed as a stream of those, with no sentence saying which broker went
away; the callers report each failure and each answer to a BrokerReachability instead,
which logs one WARNING line per broker per outage, naming it and its address, one INFO
line when it answers again, saying how long it did not, and nothing per attempt. One
instance may be shared by every client of a process (the sidecar's event log and its
leadership client), so one outage is one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import errors as kafka_errors

from eventlog._kafka_config import ClientSecurity, map_properties
from eventlog.errors import EventLogConfigError

# Its own name: a long-running process shows its INFO lines (a broker back) without
# the rest of the event log's.
log = logging.getLogger("eventlog.brokers")

# A request to one broker that failed because it cannot be reached (not an answer).
UNREACHABLE = (kafka_errors.NodeNotReadyError, kafka_errors.KafkaConnectionError)


def client_settings_from_properties(props: Mapping[str, str]) -> dict[str, Any]:
    """aiokafka client keyword arguments (bootstrap servers and security) from Kafka
    client properties without a prefix (``bootstrap.servers``, ``security.protocol``,
    ``sasl.*``, ``ssl.*``), checked as the event log's own are."""
    prefix = "remote.log.metadata.common.client."
    mapped = map_properties({prefix + k: v for k, v in props.items()}).kwargs
    fields = ClientSecurity.__dataclass_fields__
    unknown = sorted(k for k in mapped if k != "bootstrap_servers" and k not in fields)
    if unknown:
        raise EventLogConfigError(f"not a connection setting: {unknown}")
    bootstrap = mapped.pop("bootstrap_servers")
    return {"bootstrap_servers": bootstrap, **ClientSecurity(**mapped).kwargs()}


def address_of(client: Any, node: int) -> str:
    """``host:port`` of ``node`` in an aiokafka client's metadata ("unknown address"
    when it no longer lists it)."""
    broker = client.cluster.broker_metadata(node)
    return "unknown address" if broker is None else f"{broker.host}:{broker.port}"


class BrokerReachability:
    """Brokers that did not answer, since when (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._down: dict[int, tuple[str, float]] = {}  # node -> (address, since)

    def unreachable(self, node: int, address: str, error: BaseException) -> None:
        """A request to ``node`` failed for want of a connection."""
        if node in self._down:
            return
        self._down[node] = (address, self._clock())
        name, text = type(error).__name__, str(error)
        if isinstance(error, kafka_errors.NodeNotReadyError):
            reason = "no connection could be opened"  # aiokafka's text says no more
        else:  # aiokafka's errors may start their text with their name already
            reason = text if text.startswith(name) else f"{name}: {text}".removesuffix(": ")
        log.warning(
            "broker %d at %s is unreachable (%s): its requests are retried, and go to"
            " its partitions' new leaders once the cluster has elected them",
            node, address, reason,
        )  # fmt: skip

    def reachable(self, node: int) -> None:
        """``node`` answered a request."""
        gone = self._down.pop(node, None)
        if gone is not None:
            address, since = gone
            log.info(
                "broker %d at %s answers again (unreachable for %.0f s)",
                node, address, self._clock() - since,
            )  # fmt: skip

    def down(self) -> dict[int, str]:
        """The brokers unreachable now, with their addresses."""
        return {node: address for node, (address, _since) in self._down.items()}


__all__ = [
    "UNREACHABLE",
    "BrokerReachability",
    "ClientSecurity",
    "address_of",
    "client_settings_from_properties",
]
