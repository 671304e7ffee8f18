"""One process playing megatron-core's parallel state and the CP group's all_gather, for the
adapter tests (the `state` fixture in conftest.py sets it up)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch


class FakeParallelState:
    """megatron-core's parallel state as one process plays every rank: the test sets the sizes,
    the rank and the CP group the adapter reads."""

    def __init__(self) -> None:
        self.tp, self.cp, self.rank = 1, 1, 0
        self.group: Any = None



@contextlib.contextmanager
def gather_from(shards: list[torch.Tensor], group: Any) -> Iterator[None]:
    """`torch.distributed.all_gather` answered with the ranks' `shards`, over `group` only, and
    with a detached local tensor (the adapter keeps its own rank's rows in the graph)."""
    def all_gather(out: list[torch.Tensor], tensor: torch.Tensor, group: Any = None) -> None:
        assert group is expected and len(out) == len(shards) and not tensor.requires_grad
        for o, s in zip(out, shards, strict=True):
            o.copy_(s)

    expected = group
    with mock.patch.object(torch.distributed, "all_gather", all_gather):
        yield
