"""An honest compile probe: a module that consumes what a varlen attention call consumes.

A varlen attention kernel (TE's THD path, flash-attn's ``*_varlen_func``, torch's
``varlen_attn``) takes the packed rows, ``cu_seqlens_padded`` (the layout), the real
``cu_seqlens`` and ``max_seqlen``, a Python int. Under ``torch.compile(dynamic=False)`` every
tensor shape and every Python int is a guard, so each new ``(rows, len(cu_seqlens*),
max_seqlen)`` is a new graph. A probe that took the rows alone would show one graph per row
count and hide the metadata's recompiles.

On CPU the stand-in (:class:`PaddedSDPAProbe`) scatters the rows into ``[K, max_seqlen, H]``
by the metadata, runs causal SDPA and gathers back: its shapes derive from the metadata the way
a kernel's launch grid does. On CUDA :class:`VarlenAttnProbe` calls
``torch.nn.attention.varlen.varlen_attn`` itself. Usage::

    python -m bench.compile_probe                     # CPU, inductor, the default demo
    python -m bench.compile_probe --backend eager --json reports/compile_probe.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from .graph_keys import graph_key
from .settings import PackSettings

HIDDEN = 16
HEADS = 2
PROBES = ("sdpa", "varlen_attn")


class _Projections(torch.nn.Module):
    """What both probes share: the qkv and output projections around the attention call."""

    def __init__(self, hidden: int, heads: int, cp_size: int) -> None:
        super().__init__()
        self.heads = heads
        self.cp_size = cp_size
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)


class PaddedSDPAProbe(_Projections):
    """Causal attention per segment through a padded batch built from the THD metadata.

    Under CP a rank holds ``P_k / cp`` rows of segment k: the module treats them as one local
    sequence of which the first ``ceil(L_k / cp)`` are real (TE's CP kernels also read
    ``cu_seqlens_padded // cp`` and ``max_seqlen // cp``). The numbers it computes are not a
    rank's share of ring attention; what it reads, and the shapes that follow from it, are.
    """

    def __init__(self, hidden: int = HIDDEN, heads: int = HEADS, cp_size: int = 1) -> None:
        if hidden % heads:
            raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")
        super().__init__(hidden, heads, cp_size)

    def forward(self, rows: torch.Tensor, cu_seqlens_padded: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
        n, hidden = rows.shape
        cp = self.cp_size
        segments = cu_seqlens_padded.shape[0] - 1
        width = -(-max_seqlen // cp)
        bounds = cu_seqlens_padded.to(torch.int64) // cp
        real = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int64)
        real = (real + cp - 1) // cp
        row = torch.arange(n, device=rows.device)
        # Zero-length segments share their bound with the next one; right=True skips them.
        seg = torch.searchsorted(bounds[1:], row, right=True).clamp(max=max(segments - 1, 0))
        offset = row - bounds[seg]
        valid = (offset < real[seg]) & (offset < width)
        dump = segments * width
        slot = torch.where(valid, seg * width + offset, torch.full_like(offset, dump))
        q, k, v = self.qkv(rows).chunk(3, dim=-1)

        def dense(x: torch.Tensor) -> torch.Tensor:
            buf = x.new_zeros(dump + 1, hidden).index_put((slot,), x)
            return buf[:dump].view(segments, width, self.heads, hidden // self.heads) \
                .transpose(1, 2)

        att = torch.nn.functional.scaled_dot_product_attention(dense(q), dense(k), dense(v),
                                                               is_causal=True)
        flat = att.transpose(1, 2).reshape(dump, hidden)
        flat = torch.cat([flat, flat.new_zeros(1, hidden)])
        mixed = torch.where(valid[:, None], flat.index_select(0, slot), 0.0)
        return self.out(mixed)


class VarlenAttnProbe(_Projections):
    """The same inputs through ``torch.nn.attention.varlen.varlen_attn`` (CUDA, bf16/fp16)."""

    def __init__(self, hidden: int = HIDDEN, heads: int = HEADS, cp_size: int = 1) -> None:
        from torch.nn.attention.varlen import varlen_attn

        super().__init__(hidden, heads, cp_size)
        self.attn = varlen_attn

    def forward(self, rows: torch.Tensor, cu_seqlens_padded: torch.Tensor,
                cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
        n, hidden = rows.shape
        cp = self.cp_size
        cu = (cu_seqlens_padded // cp).to(torch.int32)
        width = -(-max_seqlen // cp)
        q, k, v = (t.reshape(n, self.heads, hidden // self.heads)
                   for t in self.qkv(rows).chunk(3, dim=-1))
        # The real lengths bound the keys (seqused_k); padding rows attend within their segment.
        used = ((cu_seqlens[1:] - cu_seqlens[:-1] + cp - 1) // cp).to(torch.int32)
        out = self.attn(q, k, v, cu, cu, width, width, window_size=(-1, 0), seqused_k=used)
        assert isinstance(out, torch.Tensor)
        return self.out(out.reshape(n, hidden))


def make_probe(kind: str, cp_size: int, device: torch.device) -> torch.nn.Module:
    """The probe module of ``kind``, in eval mode, with a clear error where it cannot run."""
    if kind not in PROBES:
        raise ValueError(f"probe must be one of {', '.join(PROBES)}, got {kind!r}")
    if kind == "varlen_attn":
        if device.type != "cuda":
            raise ValueError(f"probe 'varlen_attn' needs a CUDA device, got device={device}")
        try:
            import torch.nn.attention.varlen  # noqa: F401
        except ImportError:
            raise ValueError(f"probe 'varlen_attn': torch {torch.__version__} has no "
                             "torch.nn.attention.varlen") from None
        return VarlenAttnProbe(cp_size=cp_size).to(device, torch.bfloat16).eval()
    return PaddedSDPAProbe(cp_size=cp_size).to(device).eval()


# --------------------------------------------------------------------------- variants


def variants(settings: PackSettings, bucket: int | None,
             max_num_seqs: int | None) -> list[tuple[str, PackSettings, int | None]]:
    """The probe's three packings: no bucket; the bucket only; the bucket with static metadata.

    ``settings`` supplies everything else (tail, seq_align, fp8 ...); its own ``max_num_seqs``
    and ``max_seqlen`` are overridden here.
    """
    plain = settings.replace(max_num_seqs=None, max_seqlen="exact")
    out: list[tuple[str, PackSettings, int | None]] = [("no bucket", plain, None)]
    if bucket is not None:
        out.append(("bucket only", plain, bucket))
        if max_num_seqs is not None:
            out.append(("bucket + static", settings.replace(max_num_seqs=max_num_seqs,
                                                            max_seqlen="total"), bucket))
    return out


@contextmanager
def _real_compiles() -> Iterator[None]:
    """Every shape compiles (no eager fall-back at the recompile limit), caches off."""
    import torch._dynamo as dynamo
    import torch._inductor.config as inductor_config

    limits = [name for name in ("recompile_limit", "cache_size_limit",
                                "accumulated_recompile_limit", "accumulated_cache_size_limit")
              if hasattr(dynamo.config, name)]
    saved = {name: getattr(dynamo.config, name) for name in limits}
    saved_cache = inductor_config.force_disable_caches
    try:
        for name in limits:
            setattr(dynamo.config, name, 1 << 20)
        inductor_config.force_disable_caches = True
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
            yield
    finally:
        for name, value in saved.items():
            setattr(dynamo.config, name, value)
        inductor_config.force_disable_caches = saved_cache


def _pack(lengths: Sequence[int], settings: PackSettings, bucket: int | None,
          device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> tuple[Any, Any]:
    """Rank 0's rows and the plan, from impl.pack_thd on [L, HIDDEN] payloads."""
    import impl

    config = impl.PackConfig(**settings.config_kwargs(bucket))
    seqs = [torch.randn(n, HIDDEN, generator=gen) for n in lengths]
    rows, _, plan = impl.pack_thd(seqs, config, 0)
    return rows.to(device, dtype), plan


def measure_compile(batches: Sequence[Sequence[int]], settings: PackSettings,
                    bucket: int | None, max_num_seqs: int | None = None, *,
                    backend: str = "inductor", probe: str = "sdpa",
                    device: str = "cpu") -> list[dict[str, Any]]:
    """Compile the probe per variant over the same micro-batches; count graphs, time compiles.

    ``graphs`` counts the graphs the backend was handed (a graph break would add some);
    ``unique_graphs`` and ``graph_breaks`` are dynamo's own counters. ``compile_s`` sums the
    wall time of the calls that produced a new graph (trace, compile, one run); ``steady_ms`` is
    the median call of a second pass over the same inputs, every graph then compiled: what an
    inflated ``max_seqlen`` costs this stand-in per call. A throwaway compile first warms the
    backend up.
    """
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    dev = torch.device(device)
    with _real_compiles():
        inner = dynamo.lookup_backend(backend)
        graphs = [0]

        def counting(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
            graphs[0] += 1
            return inner(gm, example_inputs)

        module = make_probe(probe, settings.cp_size, dev)
        dtype = next(module.parameters()).dtype
        results = []
        with torch.no_grad():
            dynamo.reset()
            warm = torch.compile(module, backend=counting, dynamic=False)
            z = torch.zeros(8, HIDDEN, device=dev, dtype=dtype)
            cu = torch.tensor([0, 8], dtype=torch.int32, device=dev)
            warm(z, cu, cu, 8)
            for label, variant, var_bucket in variants(settings, bucket, max_num_seqs):
                dynamo.reset()
                counters.clear()
                graphs[0] = 0
                compiled = torch.compile(module, backend=counting, dynamic=False)
                compile_s = 0.0
                steady: list[float] = []
                keys, sizes, totals = set(), set(), set()
                gen = torch.Generator().manual_seed(0)
                calls = []
                for lengths in batches:
                    rows, plan = _pack(lengths, variant, var_bucket, dev, dtype, gen)
                    keys.add(graph_key(plan))
                    sizes.add(len(lengths))
                    totals.add(plan.total)
                    calls.append((rows, plan.cu_seqlens_padded.to(dev), plan.cu_seqlens.to(dev),
                                  plan.max_seqlen))
                # Pass 1 compiles; pass 2 (every graph cached) times the steady calls.
                for rep in range(2):
                    for args in calls:
                        before = graphs[0]
                        start = time.perf_counter()
                        compiled(*args)
                        if dev.type == "cuda":
                            torch.cuda.synchronize()
                        elapsed = time.perf_counter() - start
                        if graphs[0] > before:
                            compile_s += elapsed
                        elif rep:
                            steady.append(elapsed)
                results.append({
                    "variant": label, "bucket": var_bucket,
                    "max_num_seqs": variant.max_num_seqs, "max_seqlen": variant.max_seqlen,
                    "graphs": graphs[0],
                    "unique_graphs": int(counters["stats"]["unique_graphs"]),
                    "graph_breaks": int(sum(counters["graph_break"].values())),
                    "graph_keys": len(keys), "batch_sizes": sorted(sizes),
                    "totals": sorted(totals), "micro_batches": len(batches),
                    "compile_s": compile_s,
                    "steady_ms": 1e3 * statistics.median(steady) if steady else None,
                })
        dynamo.reset()
    return results


def format_results(results: Sequence[dict[str, Any]]) -> str:
    head = (f"{'variant':<16} {'graphs':>6} {'keys':>5} {'breaks':>6} {'compile s':>9} "
            f"{'steady ms':>9}  B seen / totals seen")
    lines = [head, "-" * len(head)]
    for r in results:
        steady = "-" if r["steady_ms"] is None else f"{r['steady_ms']:.2f}"
        lines.append(f"{r['variant']:<16} {r['graphs']:6d} {r['graph_keys']:5d} "
                     f"{r['graph_breaks']:6d} {r['compile_s']:9.2f} {steady:>9}  "
                     f"{_span(r['batch_sizes'])} / {_span(r['totals'])}")
    return "\n".join(lines)


def _span(values: Sequence[int]) -> str:
    if len(values) <= 4:
        return "{" + ", ".join(map(str, values)) + "}"
    return f"{len(values)} values in [{values[0]}, {values[-1]}]"


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.compile_probe",
        description="Compiled graphs of a varlen-attention consumer: no bucket, bucket only, "
                    "bucket + max_num_seqs + max_seqlen='total'.")
    p.add_argument("--dist", default="lognormal", help="synthetic length distribution")
    p.add_argument("--max-len", type=int, default=512, help="longest sample (default 512)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokens-per-mb", type=int, default=2048,
                   help="real-token budget per micro-batch (default 2048)")
    p.add_argument("--micro-batches", type=int, default=8, help="micro-batches (default 8)")
    p.add_argument("--bucket", type=int, default=2048, help="bucket (default 2048)")
    p.add_argument("--max-num-seqs", type=int, default=None,
                   help="static entry count (default: the planner's recommendation)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--tail", default="last", choices=("last", "segment"))
    p.add_argument("--backend", default="inductor", help="torch.compile backend")
    p.add_argument("--probe", default="sdpa", choices=PROBES)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", metavar="OUT.json")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from .lengths import synthetic_stream
    from .microbatches import greedy_microbatches
    from .static import recommend_max_num_seqs

    args = build_parser().parse_args(argv)
    try:
        settings = PackSettings(tp_size=args.tp, cp_size=args.cp, tail=args.tail)
        batches = greedy_microbatches(synthetic_stream(args.dist, max_len=args.max_len,
                                                       seed=args.seed),
                                      args.tokens_per_mb, args.micro_batches)
        n = args.max_num_seqs
        if n is None:
            n = recommend_max_num_seqs(batches, settings, 0.0).max_num_seqs
        results = measure_compile(batches, settings, args.bucket, n, backend=args.backend,
                                  probe=args.probe, device=args.device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads; "
          f"torch.compile(dynamic=False, backend={args.backend!r}), probe {args.probe} on "
          f"{args.device}")
    print(f"lengths: {args.dist} (max_len {args.max_len}, seed {args.seed}); "
          f"{len(batches)} greedy micro-batches of <= {args.tokens_per_mb} tokens; "
          f"tp={args.tp} cp={args.cp} tail={args.tail}; bucket {args.bucket}, "
          f"max_num_seqs {n}")
    print(format_results(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"torch": torch.__version__, "backend": args.backend,
                       "probe": args.probe, "device": args.device, "max_num_seqs": n,
                       "bucket": args.bucket, "results": results}, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
