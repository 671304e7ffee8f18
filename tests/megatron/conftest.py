"""tests/megatron: the Megatron adapter (impl/megatron.py) against verl 0.9.1's behaviour."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs that a test checks")
