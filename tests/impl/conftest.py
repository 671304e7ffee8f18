"""tests/impl: unit tests of the fast torch implementation (impl/) and its Megatron adapter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs that a test checks")


@pytest.fixture(scope="module")
def suite_target() -> Iterator[Any]:
    """The suite's target set to impl with its API beyond the protocol (`_impl_api.IMPL`) for
    one module, whose checks read it through conformance's helpers; the previous one restored
    (a run that also collects the suite, such as the mutation runner's, keeps its own)."""
    from thd_packing.conformance import under_test

    from ._impl_api import IMPL

    saved = dict(under_test._STATE)
    under_test.set_target(IMPL, "impl")
    try:
        yield IMPL
    finally:
        under_test._STATE.clear()
        under_test._STATE.update(saved)
