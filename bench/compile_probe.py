"""Measured mode of the planner: recompiles of a real compiler, with and without a bucket.

A small packed-sequence module (QKV projection, a causal per-sequence prefix mix over the THD
rows driven by position ids, output projection) is compiled with ``torch.compile(dynamic=False)``
on CPU and fed one rank's packed rows for each simulated micro-batch. With static shapes every
new row count is a new graph; a bucket caps how many there are.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from .plan import PackSettings

HIDDEN = 16


class PackedMixer(torch.nn.Module):
    """Attention-like over THD rows: each row mixes the rows before it in its own sequence."""

    def __init__(self, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)

    def forward(self, rows: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(rows).chunk(3, dim=-1)
        weight = torch.sigmoid((q * k).sum(-1, keepdim=True))
        prefix = torch.cumsum(weight * v, dim=0)
        # The row where this row's sequence starts on this rank (clamped: rows are local).
        start = (torch.arange(rows.shape[0]) - position_ids).clamp(min=0)
        mixed = prefix - prefix.index_select(0, start) + weight * v
        return self.out(mixed / (position_ids[:, None] + 1))


def _inputs(lengths: Sequence[int], settings: PackSettings, bucket: int | None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    import impl

    config = impl.PackConfig(bucket=bucket, tp_size=settings.tp_size, cp_size=settings.cp_size,
                             cp_layout=settings.cp_layout, fp8=settings.fp8,
                             min_local_rows=settings.min_local_rows)
    seqs = [torch.arange(n, dtype=torch.int64) for n in lengths]
    _, position_ids, plan = impl.pack_thd(seqs, config, 0)
    position_ids = position_ids.clamp(min=0, max=plan.max_seqlen)  # padding ids: unspecified
    rows = torch.randn(plan.local_rows, HIDDEN, generator=torch.Generator().manual_seed(0))
    return rows, position_ids


def measure_compile(batches: Sequence[Sequence[int]], settings: PackSettings,
                    buckets: Sequence[int | None], *, backend: str = "inductor",
                    arith: str = "impl") -> list[dict[str, Any]]:
    """Compile once per bucket over the same micro-batches; count graphs and time compiles.

    ``compile_s`` sums the wall time of the calls that produced a new graph (tracing, compiling
    and one run); ``total_s`` is every call. A throwaway compile first warms the backend up, so
    its one-time start-up cost is charged to neither variant. Inductor's caches are disabled.
    """
    del arith  # the packed inputs always come from impl.pack_thd (torch tensors)
    import torch._dynamo as dynamo
    import torch._inductor.config as inductor_config

    # Every shape must compile (no fall-back to eager after the default recompile limit), and
    # compiles must be real: inductor's on-disk caches would turn a repeated run (same seed,
    # same shapes) into cache hits. Both settings are restored afterwards.
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
            return _measure(batches, settings, buckets, dynamo.lookup_backend(backend))
    finally:
        for name, value in saved.items():
            setattr(dynamo.config, name, value)
        inductor_config.force_disable_caches = saved_cache


def _measure(batches: Sequence[Sequence[int]], settings: PackSettings,
             buckets: Sequence[int | None], inner: Any) -> list[dict[str, Any]]:
    import torch._dynamo as dynamo

    graphs = [0]

    def counting(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs[0] += 1
        return inner(gm, example_inputs)

    module = PackedMixer().eval()
    with torch.no_grad():
        dynamo.reset()
        warm = torch.compile(module, backend=counting, dynamic=False)
        warm(torch.zeros(8, HIDDEN), torch.arange(8))
    results = []
    for bucket in buckets:
        dynamo.reset()
        graphs[0] = 0
        compiled = torch.compile(module, backend=counting, dynamic=False)
        compile_s = total_s = 0.0
        shapes = set()
        with torch.no_grad():
            for lengths in batches:
                rows, position_ids = _inputs(lengths, settings, bucket)
                shapes.add(rows.shape[0])
                before = graphs[0]
                start = time.perf_counter()
                compiled(rows, position_ids)
                elapsed = time.perf_counter() - start
                total_s += elapsed
                if graphs[0] > before:
                    compile_s += elapsed
        results.append({"bucket": bucket, "label": "none" if bucket is None else str(bucket),
                        "graphs": graphs[0], "distinct_shapes": len(shapes),
                        "compile_s": compile_s, "total_s": total_s,
                        "micro_batches": len(batches)})
    dynamo.reset()
    return results
