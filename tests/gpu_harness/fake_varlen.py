"""A CPU stand-in for `torch.nn.attention.varlen.varlen_attn`, for the harness tests that emulate
the kernel."""

from __future__ import annotations

import torch

from gpu_tests.fp32_reference import causal_attention_fp32


def fake_varlen_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    window_size: tuple[int, int] = (-1, -1),
    num_splits: int | None = None,
) -> torch.Tensor:
    """varlen_attn's contract as FA2 applies it: causal per cu segment, monotone boundaries from
    0 to the rows, zero-length segments allowed, max_q an upper bound."""
    assert window_size == (-1, 0) and torch.equal(cu_q, cu_k)
    bounds = cu_q.tolist()
    assert bounds[0] == 0 and bounds[-1] == q.shape[0]
    assert all(a <= b for a, b in zip(bounds, bounds[1:], strict=False))
    assert max(b - a for a, b in zip(bounds, bounds[1:], strict=False)) <= max_q
    parts = [
        causal_attention_fp32(q[a:b], k[a:b], v[a:b]).to(q.dtype)
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    return torch.cat(parts)
