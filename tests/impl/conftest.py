"""tests/impl: unit tests of the fast torch implementation (impl/) and its Megatron adapter."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs that a test checks")
