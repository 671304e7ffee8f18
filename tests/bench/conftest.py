"""tests/bench: the planner (bench/plan.py) and its inputs, the benchmark's table and one tiny
run of it, the busy-host spinners; no timing is judged here."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs that a test checks")
