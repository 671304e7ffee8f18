"""Registers the traceability marker used here (harmless if registered elsewhere too)."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs a test checks")
