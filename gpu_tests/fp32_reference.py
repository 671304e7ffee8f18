"""The independent fp32 reference (explicit einsum attention per unpacked sequence) and the
comparisons every GPU test makes against it."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from .cases import QKV, Tol


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """fp32 matmuls in full precision (no TF32) while the reference runs."""
    old_mm = torch.backends.cuda.matmul.allow_tf32
    old_cudnn = torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_mm
        torch.backends.cudnn.allow_tf32 = old_cudnn


def causal_attention_fp32(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """The independent reference: softmax(q k^T * scale + causal mask) v for ONE sequence, in fp32.

    Written out with einsum and an explicit lower-triangular mask: no fused kernel, no packing, no
    cu_seqlens. Inputs ``[L, H, D]`` of any float dtype; output ``[L, H, D]`` fp32.
    """
    q32, k32, v32 = q.float(), k.float(), v.float()
    n, _, d = q32.shape
    s = 1.0 / math.sqrt(d) if scale is None else scale
    scores = torch.einsum("qhd,khd->hqk", q32, k32) * s
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v32)


@dataclass
class Result:
    """Per-sequence outputs and q/k/v gradients (real tokens only)."""

    out: list[torch.Tensor]
    dq: list[torch.Tensor]
    dk: list[torch.Tensor]
    dv: list[torch.Tensor]


FIELDS = ("out", "dq", "dk", "dv")


def as_fp32(res: Result) -> Result:
    """A copy of ``res`` in fp32 (to use one run as the reference of another)."""
    return Result(*([t.float() for t in getattr(res, name)] for name in FIELDS))


def reference_result(qkv: QKV) -> Result:
    """fp32 per-sequence causal attention and its autograd gradients, sequence by sequence."""
    res = Result([], [], [], [])
    with exact_fp32():
        for q, k, v, do in zip(qkv.q, qkv.k, qkv.v, qkv.dout, strict=True):
            q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
            out = causal_attention_fp32(q32, k32, v32)
            out.backward(do.float())
            assert q32.grad is not None and k32.grad is not None and v32.grad is not None
            res.out.append(out.detach())
            res.dq.append(q32.grad)
            res.dk.append(k32.grad)
            res.dv.append(v32.grad)
    return res


def assert_matches_reference(got: Result, ref: Result, tol: Tol, what: str) -> None:
    """Every sequence's output and q/k/v gradients agree with the fp32 reference within ``tol``."""
    for name in FIELDS:
        for i, (g, r) in enumerate(zip(getattr(got, name), getattr(ref, name), strict=True)):
            try:
                torch.testing.assert_close(g.float(), r, atol=tol.atol, rtol=tol.rtol)
            except AssertionError as e:
                raise AssertionError(f"{what}: {name} of sequence {i}: {e}") from None


def identical_fields(a: Result, b: Result) -> list[str]:
    """The fields whose real-token values are bit-identical in ``a`` and ``b``."""
    return [
        name
        for name in FIELDS
        if all(torch.equal(x, y) for x, y in zip(getattr(a, name), getattr(b, name), strict=True))
    ]


def assert_identical(a: Result, b: Result, what: str, fields: Sequence[str] = FIELDS) -> None:
    """Bit-identical real-token results (bucket on vs off) for the named fields."""
    for name in fields:
        for i, (x, y) in enumerate(zip(getattr(a, name), getattr(b, name), strict=True)):
            if not torch.equal(x, y):
                diff = (x.float() - y.float()).abs().max().item()
                raise AssertionError(f"{what}: {name} of seq {i} differs (max |diff| {diff:g})")
