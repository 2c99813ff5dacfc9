"""Fixtures shared by the integration tests that need them by name."""

from __future__ import annotations

from tests.integration.webhook_support import open_network, receiver

__all__ = ["open_network", "receiver"]
