"""Which settings hold secrets, and how they are shown: never as they are.

Invariant: every tool output, log line and Spark input partition that carries settings
goes through ``redact`` or ``without_secrets`` first, so a password, a JAAS secret, a
private key or an AWS secret key never leaves the process that read it from its
configuration. A setting is secret by its name (Kafka's and boto3's names); paths to
key files are not secrets and stay visible.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

REDACTED = "[redacted]"
SECRETS_FROM = "secrets_from"
"""Key of remote options that left their secrets behind: the config file to read them from."""
_SECRET_WORDS = (
    "password",
    "secret",
    "token",
    "jaas.config",
    "private.key",
    "keystore.key",
    "keystore.certificate.chain",
    "credentials",
    "session_token",
)
_NOT_SECRET_ENDINGS = (".file", "_file", ".location", ".type", ".url", ".class", ".endpoint")
# password=... inside a JAAS line (quoted or bare), e.g. ScramLoginModule required
# username="writer" password="...";
_JAAS_PASSWORD = re.compile(r'(password\s*=\s*)("(?:[^"\\]|\\.)*"|[^\s;]+)', re.IGNORECASE)


def is_secret(key: str) -> bool:
    """True for a setting whose value is a secret (by its name)."""
    name = key.lower()
    if name.endswith(_NOT_SECRET_ENDINGS):
        return False
    return any(word in name for word in _SECRET_WORDS)


def redact_value(key: str, value: Any) -> Any:
    """``value`` as it may be shown: a JAAS line keeps its username, not its password."""
    if not is_secret(key) or value is None:
        return value
    if key.lower().endswith("jaas.config") and isinstance(value, str):
        return _JAAS_PASSWORD.sub(lambda m: f'{m.group(1)}"{REDACTED}"', value)
    return REDACTED


def redact(obj: Any, key: str = "") -> Any:
    """A copy of ``obj`` (mappings and lists, nested) with every secret redacted."""
    if isinstance(obj, Mapping):
        return {k: redact(v, str(k)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact(v, key) for v in obj]
    return redact_value(key, obj)


def secret_values(obj: Any, key: str = "") -> set[str]:
    """Every secret value in ``obj`` (mappings and lists, nested; a JAAS line gives its
    password): what ``scrub`` keeps out of a message that was not built from settings."""
    if isinstance(obj, Mapping):
        return {v for k, item in obj.items() for v in secret_values(item, str(k))}
    if isinstance(obj, list | tuple):
        return {v for item in obj for v in secret_values(item, key)}
    if not is_secret(key) or obj is None or obj == "":
        return set()
    if key.lower().endswith("jaas.config") and isinstance(obj, str):
        return {m.group(2).strip('"') for m in _JAAS_PASSWORD.finditer(obj)} - {""}
    return {str(obj)}


def scrub(text: str, secrets: set[str]) -> str:
    """``text`` with each of ``secrets`` replaced by [redacted] (the longest first)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


class SecretScrubber(logging.Filter):
    """A log filter that scrubs ``secrets()`` from every record it passes: client
    libraries log what they send at DEBUG (aiokafka logs a SASL/PLAIN request whole,
    password included)."""

    def __init__(self, secrets: Callable[[], set[str]]) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self._secrets()
        if secrets:
            message = record.getMessage()
            scrubbed = scrub(message, secrets)
            if scrubbed != message:
                record.msg, record.args = scrubbed, None
        return True


def without_secrets(options: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the options without their secret settings, the names of those removed)."""
    kept = {k: v for k, v in options.items() if not is_secret(k)}
    return kept, sorted(k for k in options if is_secret(k))


__all__ = [
    "REDACTED",
    "SECRETS_FROM",
    "SecretScrubber",
    "is_secret",
    "redact",
    "redact_value",
    "scrub",
    "secret_values",
    "without_secrets",
]
