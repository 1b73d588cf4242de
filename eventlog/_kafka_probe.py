"""A first connection to Kafka that says why it failed: the name, the socket, the
TLS and SASL verdicts.

aiokafka's clients retry a bootstrap that fails and report only "Unable to
bootstrap", which turns a host name that does not resolve, a port nothing listens
on, a wrong password or an untrusted certificate into a timeout after
``init_timeout_ms``. A name lookup and one plain connection to each bootstrap server
(then, with TLS or SASL, one with the same security settings) get the real reason
within a round trip.

Invariant: no bootstrap name resolves (as Kafka's clients, "no resolvable bootstrap
urls") is an EventLogConfigError, never retried; a verdict about credentials (SASL
authentication failed, the broker's certificate not trusted, this client's
certificate refused) is an EventLogAuthError, never retried; no server accepting a
connection (refused, unreachable, a name lookup that failed for now) is a retriable
EventLogTransportError naming each server's reason once, for the caller's retries:
an EventLogRefusedError when every server that resolves refused it (nothing listens).
No message holds a password or key material.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.conn import create_conn

from eventlog._kafka_config import ClientSecurity
from eventlog.errors import (
    EventLogAuthError,
    EventLogConfigError,
    EventLogRefusedError,
    EventLogTransportError,
)


def bootstrap_addresses(servers: str | list[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in (i.strip() for i in items):
        host, _, port = item.rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


REFUSED = "refused the connection"
# getaddrinfo's answers that a name does not exist (not "try again later").
_NO_SUCH_NAME = {
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)
}


async def probe_reachable(servers: str | list[str], *, timeout_ms: int) -> None:
    """Return once one bootstrap server accepts a TCP connection; else raise
    EventLogConfigError when no name resolves, EventLogRefusedError when every server
    that resolves refused the connection, EventLogTransportError (retriable) naming
    each server's reason otherwise."""
    addresses = bootstrap_addresses(servers)
    if not addresses:
        raise EventLogConfigError(f"bootstrap servers {servers!r}: no host:port in them")
    loop = asyncio.get_running_loop()
    reasons: list[str] = []
    unresolved = refused = 0
    for host, port in addresses:
        where = f"{host}:{port}"
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            if e.errno in _NO_SUCH_NAME:
                unresolved += 1
                reasons.append(f"bootstrap server {where}: the name {host} does not resolve")
            else:
                reasons.append(
                    f"bootstrap server {where}: the name {host} cannot be resolved now"
                    f" ({e.strerror})"
                )
            continue
        reason = await _connect(infos, timeout_ms)
        if reason is None:
            return
        refused += reason == REFUSED
        reasons.append(f"{where} {reason}")
    if unresolved == len(addresses):
        raise EventLogConfigError("; ".join(reasons))
    if refused and unresolved + refused == len(addresses):
        raise EventLogRefusedError("; ".join(reasons), retriable=True)
    raise EventLogTransportError("; ".join(reasons), retriable=True)


LISTEN_POLL_S = 0.05


async def wait_listening(servers: str | list[str], most_s: float) -> bool:
    """Whether a bootstrap server accepted a TCP connection within ``most_s``, polled
    every LISTEN_POLL_S: a retry after refusals starts as soon as a broker listens (a
    broker's own plugin starts before its listener opens), not a backoff later."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + most_s
    while True:
        try:
            await probe_reachable(servers, timeout_ms=1000)
            return True
        except (EventLogConfigError, EventLogTransportError):
            pass
        left = deadline - loop.time()
        if left <= 0:
            return False
        await asyncio.sleep(min(LISTEN_POLL_S, left))


async def _connect(infos: list[Any], timeout_ms: int) -> str | None:
    """None when one of the resolved addresses accepts a connection, else why not."""
    reason = "has no address"
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await asyncio.get_running_loop().sock_connect(sock, address)
            return None
        except ConnectionRefusedError:
            reason = REFUSED
        except TimeoutError:
            reason = f"did not answer a connection within {timeout_ms} ms"
        except OSError as e:
            reason = f"could not be reached ({e.strerror or type(e).__name__})"
        finally:
            sock.close()
    return reason


async def probe_credentials(
    servers: str | list[str], security: ClientSecurity, *, client_id: str, timeout_ms: int
) -> None:
    """Raise EventLogAuthError if a bootstrap server refuses who this client is."""
    if security.security_protocol == "PLAINTEXT":
        return
    verdict: EventLogAuthError | None = None
    for host, port in bootstrap_addresses(servers):
        try:
            conn = await create_conn(
                host, port, client_id=client_id, request_timeout_ms=timeout_ms, **security.kwargs()
            )
        except Exception as exc:  # classified below; others are for the caller's retries
            verdict = _verdict(exc, host, port, security) or verdict
            continue
        conn.close()
        return  # one server accepted us: the credentials are good
    if verdict is not None:
        raise verdict


def _verdict(
    exc: BaseException, host: str, port: int, security: ClientSecurity
) -> EventLogAuthError | None:
    where = f"{host}:{port}"
    if isinstance(
        exc, kafka_errors.SaslAuthenticationFailed | kafka_errors.AuthenticationFailedError
    ):
        return EventLogAuthError(
            f"authentication failed for {security.principal} ({security.sasl_mechanism}) at"
            f" {where}: {exc.args[0] if exc.args else type(exc).__name__}; check the user"
            " and password in sasl.jaas.config"
        )
    if isinstance(exc, kafka_errors.UnsupportedSaslMechanismError):
        return EventLogAuthError(f"{where}: {exc.args[0] if exc.args else exc}")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return EventLogAuthError(
            f"TLS: the certificate of the broker at {where} is not trusted"
            f" ({exc.verify_message}); check ssl.truststore.* and that bootstrap.servers"
            " names a host the broker's certificate is for"
        )
    cause: Any = exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLError) and "ALERT" in str(cause.reason or ""):
        mine = (
            f"the client certificate {security.client_certificate_subject}"
            if security.client_certificate_subject
            else "this client's certificate (or its lack of one)"
        )
        return EventLogAuthError(
            f"TLS: the broker at {where} refused {mine} ({cause.reason}); check"
            " ssl.keystore.* and that the broker trusts its issuer"
        )
    return None
