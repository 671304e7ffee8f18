"""Fixtures shared by the test folders."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator

import pytest

from thd_packing.conformance import plugin

plugin.one_thread()  # before any test module imports torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def real_group() -> Iterator[None]:
    """A real single-process gloo group with Megatron's parallel state on top; always torn down.
    megatron-core is imported here, so only the tests that ask for the group need it."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=60))
    try:
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1,
                                                 context_parallel_size=1)
        yield
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
