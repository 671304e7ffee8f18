"""The recompile check: a small packed-attention block compiled with
``torch.compile(dynamic=False)`` over a stream of micro-batches, counting the graphs dynamo hands
to the backend."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .fp32_reference import causal_attention_fp32, exact_fp32
from .packed_run import real_rows


# A small packed-attention block for the recompile check. Its attention mask is built from
# per-row segment ids (verl convention: pad rows belong to their sequence), so every tensor it
# sees has a shape that depends on the packed total alone.
class PackedBlock(torch.nn.Module):
    """qkv projection, per-sequence causal attention (dense mask from segment ids), output proj."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
        t, hidden = x.shape
        q, k, v = self.qkv(x).view(t, 3, self.heads, hidden // self.heads).unbind(1)
        rows = torch.arange(t, device=x.device)
        mask = (seg[:, None] == seg[None, :]) & (rows[None, :] <= rows[:, None])
        o = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask
        )
        return self.proj(o.transpose(0, 1).reshape(t, hidden))


def block_reference_fp32(block: PackedBlock, x: torch.Tensor) -> torch.Tensor:
    """The block on ONE unpacked sequence ``[L, hidden]`` with the explicit fp32 reference."""
    with exact_fp32():
        w = {n: p.detach().float() for n, p in block.named_parameters()}
        n, hidden = x.shape
        qkv = x.float() @ w["qkv.weight"].T + w["qkv.bias"]
        q, k, v = qkv.view(n, 3, block.heads, hidden // block.heads).unbind(1)
        o = causal_attention_fp32(q, k, v).reshape(n, hidden)
        return o @ w["proj.weight"].T + w["proj.bias"]


def segment_ids(plan: Any, device: torch.device | str) -> torch.Tensor:
    """Sequence index of every row of a cp=1 buffer, padding included (R-META-6)."""
    padded = torch.as_tensor(plan.seqlens_padded, dtype=torch.int64)
    return torch.repeat_interleave(torch.arange(padded.numel()), padded).to(device)


class GraphCounter:
    """A torch.compile backend that counts the graphs it is handed and delegates to ``backend``."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        self.graphs += 1
        if self.backend == "eager":
            return gm.forward
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend(self.backend)(gm, example_inputs)


@contextlib.contextmanager
def recompile_limit(limit: int) -> Iterator[None]:
    """Raise dynamo's recompile limit so that a long stream is not cut short (and miscounted)."""
    cfg = torch._dynamo.config
    names = [n for n in ("recompile_limit", "cache_size_limit") if hasattr(cfg, n)][:1]
    old = {n: getattr(cfg, n) for n in names}
    for n in names:
        setattr(cfg, n, limit)
    try:
        yield
    finally:
        for n, val in old.items():
            setattr(cfg, n, val)


@dataclass
class CompileStream:
    """Outcome of compiling the block over one stream of micro-batches."""

    graphs: int
    totals: list[int]
    max_error: float


def compile_stream(
    impl_mod: Any,
    block: PackedBlock,
    batches: Sequence[Sequence[int]],
    config: Any,
    *,
    backend: str,
    device: torch.device | str,
    seed: int = 0,
) -> CompileStream:
    """Run ``torch.compile(block, dynamic=False)`` over the packed stream; count graphs and check
    every real token against the fp32 per-sequence reference."""
    torch._dynamo.reset()
    counter = GraphCounter(backend)
    compiled = torch.compile(block, backend=counter, dynamic=False)
    g = torch.Generator().manual_seed(seed)
    hidden = block.qkv.in_features
    totals = []
    max_error = 0.0
    with recompile_limit(4 * len(batches) + 8), torch.no_grad():
        for lengths in batches:
            seqs = [torch.randn(n, hidden, generator=g).to(device) for n in lengths]
            x, _, plan = impl_mod.pack_thd(seqs, config, 0)
            x = x.to(device)
            totals.append(int(plan.total))
            y = compiled(x, segment_ids(plan, device))
            for got, s in zip(real_rows(y, plan), seqs, strict=True):
                want = block_reference_fp32(block, s)
                torch.testing.assert_close(got.float(), want, atol=1e-3, rtol=1e-3)
                if s.shape[0]:
                    max_error = max(max_error, (got.float() - want).abs().max().item())
    torch._dynamo.reset()
    return CompileStream(counter.graphs, totals, max_error)


def stream_batches(seed: int, count: int, *, max_len: int = 300) -> list[list[int]]:
    """A seeded stream of micro-batch lengths for the recompile check."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        b = int(torch.randint(1, 5, (1,), generator=g))
        out.append([int(x) for x in torch.randint(0, max_len + 1, (b,), generator=g)])
    return out
