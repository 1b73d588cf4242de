"""A first connection to Kafka that says why it failed: the TLS and SASL verdicts.

aiokafka's clients retry a bootstrap that fails and report only "Unable to
bootstrap", which turns a wrong password or an untrusted certificate into a timeout
after ``init_timeout_ms``. One plain connection to each bootstrap server, with the
same security settings, gets the real reason within a round trip.

Invariant: a verdict about credentials (SASL authentication failed, the broker's
certificate not trusted, this client's certificate refused) is an EventLogAuthError,
never retried; anything else (refused, unreachable) is left to the normal retries.
No message holds a password or key material.
"""

from __future__ import annotations

import ssl
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.conn import create_conn

from eventlog._kafka_config import ClientSecurity
from eventlog.errors import EventLogAuthError


def bootstrap_addresses(servers: str | list[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in (i.strip() for i in items):
        host, _, port = item.rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


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
