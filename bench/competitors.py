"""The competitors impl is timed against: upstream verl 0.9.1 and the NumPy reference."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch


class Verl:
    """verl 0.9.1's preprocess/postprocess_thd_engine on a fake parallel state.

    The standalone loader of verl's util.py is the conformance suite's
    (``conformance/targets/verl.py``), so both measure the same code the same way.
    """

    def __init__(self) -> None:
        from importlib import metadata

        from conformance.targets.verl import FakeParallelState, load_util

        self.mod: Any = load_util()  # a module with mpu and torch we swap
        self.fake_state = FakeParallelState
        self.version = metadata.version("verl")

    def pack_fn(self, nested: torch.Tensor, tp: int, cp: int, rank: int,
                bucket: int | None) -> Callable[[], Any]:
        state = self.fake_state(tp, cp, rank)

        def call() -> Any:
            self.mod.mpu = state
            return self.mod.preprocess_thd_engine(nested, pad_to_length_bucket=bucket)

        return call

    def unpack_fn(self, nested: torch.Tensor, shards: list[torch.Tensor], params: Any,
                  tp: int, cp: int) -> Callable[[], Any]:
        """Rank 0's postprocess. Its ``all_gather`` hands over the other ranks' rows without a
        copy: impl's unpack is given gathered shards too, so neither is charged for the gather."""
        state = self.fake_state(tp, cp, 0)
        batch = nested.size(0)
        local_torch = _TorchWithHandedOverGather(shards)

        def call() -> Any:
            self.mod.mpu = state
            real_torch = self.mod.torch
            self.mod.torch = local_torch
            try:
                return self.mod.postprocess_thd_engine(shards[0][None], params, nested, batch)
            finally:
                self.mod.torch = real_torch

        return call


class _TorchWithHandedOverGather:
    """``torch`` as verl's postprocess sees it on one process: all_gather yields the shards."""

    def __init__(self, shards: list[torch.Tensor]) -> None:
        def all_gather(output: list[torch.Tensor], tensor: torch.Tensor,
                       group: Any = None) -> None:
            for rank, shard in enumerate(shards):
                output[rank] = shard[None]

        self.distributed = SimpleNamespace(all_gather=all_gather)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def load_reference() -> Any:
    try:
        import reference
    except ImportError:
        return None
    return reference
