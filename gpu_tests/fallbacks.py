"""What a kernel is told about a packed THD buffer (AttnMeta) and the torch-only attention
fallbacks that read it: per-sequence SDPA (any device) and varlen_attn (CUDA flash).

Spec rules used to read a packed buffer: R-META-2/3 (cu_seqlens, cu_seqlens_padded), R-META-4
(max_seqlen), R-META-6 with R-SHARD-1 (sequence ``i`` occupies ``[cu_padded[i], cu_padded[i+1])``,
its real tokens first, R-ALIGN-4).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .cases import CONVENTIONS


@dataclass(frozen=True)
class AttnMeta:
    """What an attention kernel is told about a packed THD buffer (int32 tensors on the device)."""

    cu_seqlens_q: torch.Tensor
    cu_seqlens_kv: torch.Tensor
    cu_seqlens_q_padded: torch.Tensor
    cu_seqlens_kv_padded: torch.Tensor
    max_seqlen_q: int
    max_seqlen_kv: int
    convention: str
    declared_pad_between_seqs: bool | None = None
    """Set by graph-safe callers: the flag decided on the host, so that reading it does not
    compare device tensors (a sync, forbidden while a CUDA graph is being captured)."""

    @property
    def pad_between_seqs(self) -> bool:
        """Whether any padding rows sit outside the real boundaries (declared, else compared)."""
        if self.declared_pad_between_seqs is not None:
            return self.declared_pad_between_seqs
        return not torch.equal(self.cu_seqlens_q, self.cu_seqlens_q_padded)


def _i32(x: Any, device: torch.device | str) -> torch.Tensor:
    return torch.as_tensor(x).to(device=device, dtype=torch.int32)


def attn_meta(plan: Any, convention: str, device: torch.device | str) -> AttnMeta:
    """Kernel metadata from a plan (R-META-2..4), in one of the two CONVENTIONS."""
    padded = _i32(plan.cu_seqlens_padded, device)
    if convention == "padded":
        real = _i32(plan.cu_seqlens, device)
    elif convention == "verl":
        real = padded
    else:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    max_seqlen = int(plan.max_seqlen)
    return AttnMeta(real, real, padded, padded, max_seqlen, max_seqlen, convention)


def _segments(meta: AttnMeta) -> list[tuple[int, int]]:
    """(start row, attended rows) per sequence: starts from cu_seqlens_padded, counts from
    cu_seqlens."""
    starts = meta.cu_seqlens_q_padded.tolist()
    real = meta.cu_seqlens_q.tolist()
    segs = []
    for i in range(len(starts) - 1):
        n = real[i + 1] - real[i]
        if n < 0 or starts[i] + n > starts[i + 1]:
            raise ValueError(
                f"sequence {i}: {n} rows do not fit its padded slot {starts[i : i + 2]}"
            )
        segs.append((starts[i], n))
    return segs


def _scatter_rows(
    like: torch.Tensor, segs: Sequence[tuple[int, int]], pieces: list[torch.Tensor]
) -> torch.Tensor:
    """Zeros shaped like ``like`` with ``pieces`` written at the segments (differentiable)."""
    out = like.new_zeros(like.shape)
    idx = [torch.arange(s, s + n, device=like.device) for s, n in segs if n > 0]
    if not idx:
        return out
    return out.index_copy(0, torch.cat(idx), torch.cat(pieces))


def sdpa_per_sequence(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
) -> torch.Tensor:
    """Torch fallback: causal SDPA on each sequence's rows; rows outside them are zero.

    Honours both arrays like TE's THD path: sequence ``i`` starts at ``cu_seqlens_padded[i]`` and
    attends its first ``cu_seqlens[i+1] - cu_seqlens[i]`` rows. Works on any device and dtype.
    """
    segs = _segments(meta)
    pieces = []
    for s, n in segs:
        if n == 0:
            continue
        qi, ki, vi = (t[s : s + n].transpose(0, 1) for t in (q, k, v))
        pieces.append(F.scaled_dot_product_attention(qi, ki, vi, is_causal=True).transpose(0, 1))
    return _scatter_rows(q, segs, pieces)


def varlen_unavailable_reason() -> str | None:
    """None when ``torch.nn.attention.varlen.varlen_attn`` can run here, else why not."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn ({e})"
    if not torch.cuda.is_available():
        return "varlen_attn needs CUDA"
    return None


def _varlen_causal_kwargs() -> dict[str, Any]:
    """Causal flag for varlen_attn across torch versions (is_causal=True, or window (-1, 0))."""
    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    kwargs: dict[str, Any] = {}
    if "is_causal" in params:
        kwargs["is_causal"] = True
    elif "window_size" in params:
        kwargs["window_size"] = (-1, 0)
    else:
        raise RuntimeError("varlen_attn has neither is_causal nor window_size")
    if "num_splits" in params:
        kwargs["num_splits"] = 1  # batch invariance: a sequence's result ignores its neighbours
    return kwargs


def varlen_packed(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta, *, inflated: bool = False
) -> torch.Tensor:
    """Torch fallback on real GPU varlen attention (flash) over the packed buffer.

    varlen_attn has no padded-offset argument: with padding between sequences, the real rows are
    gathered into a dense buffer, attended with the real cu_seqlens and scattered back (pad rows
    zero, as TE's fused backend does). In the verl convention the buffer goes in unchanged.
    ``inflated``: the gathered call gets the plan's ``max_seqlen`` (an upper bound, R-STATIC-2)
    instead of the dense buffer's own longest sequence.
    """
    from torch.nn.attention.varlen import varlen_attn

    kwargs = _varlen_causal_kwargs()
    if not meta.pad_between_seqs:
        cu = meta.cu_seqlens_q
        out = varlen_attn(q, k, v, cu, cu, meta.max_seqlen_q, meta.max_seqlen_kv, **kwargs)
        assert isinstance(out, torch.Tensor)
        return out
    segs = _segments(meta)
    idx = torch.cat([torch.arange(s, s + n, device=q.device) for s, n in segs])
    qc, kc, vc = (t.index_select(0, idx) for t in (q, k, v))
    cu = meta.cu_seqlens_q
    # The dense buffer's own longest sequence (not the padded max_seqlen): the kernel then gets
    # the same arguments whatever the padding, so bucket on/off is bit-identical by construction.
    longest = max(n for _, n in segs)
    max_q, max_kv = (meta.max_seqlen_q, meta.max_seqlen_kv) if inflated else (longest, longest)
    oc = varlen_attn(qc, kc, vc, cu, cu, max_q, max_kv, **kwargs)
    assert isinstance(oc, torch.Tensor)
    return q.new_zeros(q.shape).index_copy(0, idx, oc)


def varlen_inflated(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
) -> torch.Tensor:
    """``varlen_packed`` with the plan's (static) max_seqlen on every call."""
    return varlen_packed(q, k, v, meta, inflated=True)


AttnFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttnMeta], torch.Tensor]
