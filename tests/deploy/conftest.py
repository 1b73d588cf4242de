"""Fixtures of the deploy/ checks: Prometheus' binaries (fetched once, or a skip)."""

from tests.fixtures.prometheus import prometheus_bin

__all__ = ["prometheus_bin"]
