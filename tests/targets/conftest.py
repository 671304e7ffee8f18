"""tests/targets: the loaders of the built-in peer targets (verl-fsdp, megatron-core)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs that a test checks")
