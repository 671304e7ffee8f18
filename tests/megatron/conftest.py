"""tests/megatron: the Megatron adapter (impl/megatron.py) against verl 0.9.1's behaviour."""

from __future__ import annotations

import pytest

from ._fake_mpu import FakeParallelState


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rules(*ids): spec rule IDs that a test checks")


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch) -> FakeParallelState:
    from megatron.core import parallel_state

    st = FakeParallelState()
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: st.tp)
    monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: st.cp)
    monkeypatch.setattr(parallel_state, "get_context_parallel_rank", lambda: st.rank)
    monkeypatch.setattr(parallel_state, "get_context_parallel_group", lambda: st.group)
    return st
