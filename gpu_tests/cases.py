"""Test cases shared by the GPU tests: tolerances, cu_seqlens conventions, batches, q/k/v.

Device-independent: ``tests/gpu_harness`` builds the same cases on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch


# Tolerances: TransformerEngine's own attention tests use atol = rtol = 2.5e-2 for bf16.
class Tol(NamedTuple):
    """Absolute and relative tolerance for torch.testing.assert_close."""

    atol: float
    rtol: float


BF16_TOL = Tol(atol=2.5e-2, rtol=2.5e-2)
# fp32 against fp32 (the CPU harness, the compiled block): only summation order differs.
FP32_TOL = Tol(atol=1e-4, rtol=1e-4)

CONVENTIONS = ("padded", "verl")
"""``padded``: real ``cu_seqlens`` plus the plan's ``cu_seqlens_padded`` (TE's THD convention,
padding excluded). ``verl``: ``cu_seqlens = cu_seqlens_padded`` (Megatron/verl, R-MEG-1: padding
counts as part of its causal sequence, harmless for real tokens because it is a suffix)."""

# Batches: fixed edge cases (R-IN-2: zero-length first, last, in the middle) plus seeded random
# ones. Every batch has at least one real token so that the attention is not empty.
EDGE_BATCHES: dict[str, list[int]] = {
    "zero-first-last": [0, 45, 0],
    "single-token": [1],
    "mixed": [130, 0, 3, 64, 0, 1],
}
RANDOM_SEEDS = (0, 1, 2)


def random_lengths(seed: int, *, max_len: int = 192, max_batch: int = 6) -> list[int]:
    """Seeded random lengths, about a quarter of them zero (R-IN-2)."""
    g = torch.Generator().manual_seed(1000 + seed)
    b = int(torch.randint(1, max_batch + 1, (1,), generator=g))
    lengths = []
    for _ in range(b):
        if float(torch.rand((), generator=g)) < 0.25:
            lengths.append(0)
        else:
            lengths.append(int(torch.randint(1, max_len + 1, (1,), generator=g)))
    if not any(lengths):
        lengths[0] = 1 + seed
    return lengths


def all_batches() -> dict[str, list[int]]:
    """Every batch the attention tests run, by id."""
    out = dict(EDGE_BATCHES)
    for s in RANDOM_SEEDS:
        out[f"random{s}"] = random_lengths(s)
    return out


@dataclass
class QKV:
    """Per-sequence query/key/value and output-gradient tensors, each ``[L_i, H, D]``."""

    q: list[torch.Tensor]
    k: list[torch.Tensor]
    v: list[torch.Tensor]
    dout: list[torch.Tensor]


def make_qkv(
    lengths: Sequence[int],
    heads: int,
    head_dim: int,
    *,
    seed: int,
    device: torch.device | str,
    dtype: torch.dtype = torch.bfloat16,
) -> QKV:
    """Seeded random q/k/v/dout per sequence (generated on the CPU, so identical on any device)."""
    g = torch.Generator().manual_seed(seed)

    def one(n: int) -> torch.Tensor:
        return torch.randn(n, heads, head_dim, generator=g).to(device=device, dtype=dtype)

    return QKV(
        q=[one(n) for n in lengths],
        k=[one(n) for n in lengths],
        v=[one(n) for n in lengths],
        dout=[one(n) for n in lengths],
    )


# The CUDA-graph stream: micro-batches of different B (1..7, zero-length sequences
# included) whose packs all fall in one bucket of 512 rows with tp 2, so that with
# max_num_seqs = 8 and max_seqlen="total" one captured graph serves every one of them.
GRAPH_STREAM: tuple[tuple[int, ...], ...] = (
    (200,),
    (50, 0, 120),
    (10, 30, 0, 70, 5),
    (64, 64, 64, 64, 64, 64, 1),
    (0, 301),
)
GRAPH_BUCKET = 512
GRAPH_MAX_NUM_SEQS = 8
GRAPH_TP = 2
