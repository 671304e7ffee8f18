"""tests/bench: the bucket planner (bench/plan.py) and its inputs; fast, no benchmarks here."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs that a test checks")
