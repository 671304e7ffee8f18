"""The benchmark's batches: seeded lengths and payloads, the same for every implementation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

MAX_LEN = 4096
PAYLOADS = ("ids", "f32x8")  # 1-D int64 token ids; a [L, 8] float32 tensor


def draw_lengths(batch: int, seed: int) -> list[int]:
    """Lengths uniform in [1, MAX_LEN], seeded per B so every implementation sees the same."""
    rng = np.random.default_rng(seed + batch)
    return [int(v) for v in rng.integers(1, MAX_LEN + 1, size=batch)]


def make_batch(lengths: Sequence[int], payload: str, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if payload == "ids":
        return [torch.randint(0, 150_000, (n,), dtype=torch.int64, generator=gen)
                for n in lengths]
    return [torch.randn(n, 8, dtype=torch.float32, generator=gen) for n in lengths]
