"""Static metadata (R-STATIC-1/2) as a consumer sees it, and two graph-safe
torch fallbacks that read it without a host sync.

With ``max_num_seqs = N`` every plan has N entries (``cu_seqlens*`` N + 1; the entries past the
real content are zero-length at the end of the buffer), and with ``max_seqlen="total"``
``max_seqlen`` is the total row count T. So a consumer's metadata shapes and ints depend on
(T, N) alone. Within one bucket T takes one value, so the metadata is fixed across micro-batches
of different B: one captured CUDA graph serves them all.

Why zero-length entries and an inflated max_seqlen are safe for the kernels is written up, from
the kernels' sources, in the spec's §4a (TE's cuDNN path itself pads the batch with zero-length
sequences; FA2 CTAs past a sequence's real length exit at once).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .cases import CONVENTIONS
from .fallbacks import AttnMeta, _varlen_causal_kwargs


class GraphKey(NamedTuple):
    """Every shape and int a captured or compiled varlen consumer sees of one cp=1 pack."""

    total: int
    cu_seqlens_len: int
    cu_seqlens_padded_len: int
    max_seqlen: int


def graph_key(plan: Any) -> GraphKey:
    """The plan's graph key: two micro-batches can share one captured graph only if it is equal."""
    return GraphKey(
        total=int(plan.total),
        cu_seqlens_len=int(torch.as_tensor(plan.cu_seqlens).numel()),
        cu_seqlens_padded_len=int(torch.as_tensor(plan.cu_seqlens_padded).numel()),
        max_seqlen=int(plan.max_seqlen),
    )


def declared_pad_between_seqs(convention: str) -> bool:
    """The pad flag decided on the host from the convention alone, as a captured graph needs it:
    ``padded`` passes real cu_seqlens (padding between sequences possible: True, Megatron's
    graph path makes the same choice), ``verl`` passes the padded ones as real (False)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    return convention == "padded"


def dense_varlen_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
) -> torch.Tensor:
    """Graph-safe torch fallback: rows gathered into ``[N, max_seqlen, H, D]`` by the metadata,
    causal SDPA with a key mask, results gathered back (pad rows zero).

    No host reads: every shape depends on (T, N, max_seqlen) only, so it can be captured in a
    CUDA graph and compiled once per graph key. Segment ``i`` starts at ``cu_seqlens_padded[i]``
    and attends its first ``cu_seqlens[i+1] - cu_seqlens[i]`` rows. A segment longer than
    ``max_seqlen`` is NOT detected (that needs a sync): its rows past ``max_seqlen`` come out zero,
    which is why a static consumer needs a static upper bound (R-STATIC-2), not a stale maximum.
    Cost: ``N * H * max_seqlen**2`` scores, like TE's unfused backend.
    """
    t, heads, dim = q.shape
    n = meta.cu_seqlens_q_padded.numel() - 1
    s = int(meta.max_seqlen_q)
    dev = q.device
    starts = meta.cu_seqlens_q_padded[:-1].long()
    lens = (meta.cu_seqlens_q[1:] - meta.cu_seqlens_q[:-1]).long()
    offs = torch.arange(s, device=dev)
    src = starts[:, None] + offs[None, :]  # [N, s] source row of every dense slot
    slot_ok = (offs[None, :] < lens[:, None]) & (src < t)
    src_flat = torch.where(slot_ok, src, 0).reshape(-1)
    ok = slot_ok.reshape(-1, 1, 1).to(q.dtype)

    def dense(x: torch.Tensor) -> torch.Tensor:
        return (x.index_select(0, src_flat) * ok).view(n, s, heads, dim).transpose(1, 2)

    causal = torch.ones(s, s, dtype=torch.bool, device=dev).tril()
    diag = torch.eye(s, dtype=torch.bool, device=dev)
    # Each query also sees itself, so a slot without real keys (a zero-length entry, a padding
    # slot) has a finite softmax; its output is dropped below.
    mask = (slot_ok[:, None, None, :] | diag) & causal  # [N, 1, s, s]
    o = torch.nn.functional.scaled_dot_product_attention(dense(q), dense(k), dense(v), mask)
    o_flat = o.transpose(1, 2).reshape(n * s, heads, dim)
    rows = torch.arange(t, device=dev)
    seg = torch.searchsorted(meta.cu_seqlens_q_padded[1:].contiguous(), rows.int(), right=True)
    seg_c = seg.clamp(max=n - 1)
    off = rows - starts[seg_c]
    row_ok = (seg < n) & (off < lens[seg_c]) & (off < s)
    back = torch.where(row_ok, seg_c * s + off, 0)
    return o_flat.index_select(0, back) * row_ok.view(t, 1, 1).to(o_flat.dtype)


def varlen_static(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
) -> torch.Tensor:
    """Graph-safe ``varlen_attn`` call: the packed buffer as it is, ``cu_seqlens`` as given and the
    static ``max_seqlen``. varlen_attn has no padded-offset argument, so this is the ``verl``
    convention only (padding attended as part of its sequence); ``padded`` raises ValueError."""
    if meta.convention != "verl":
        raise ValueError(
            f"varlen_static needs the verl convention (cu_seqlens = cu_seqlens_padded), "
            f"got convention={meta.convention!r}"
        )
    from torch.nn.attention.varlen import varlen_attn

    cu = meta.cu_seqlens_q
    out = varlen_attn(
        q, k, v, cu, cu, meta.max_seqlen_q, meta.max_seqlen_kv, **_varlen_causal_kwargs()
    )
    assert isinstance(out, torch.Tensor)
    return out
