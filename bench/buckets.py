"""Candidate buckets evaluated over simulated micro-batches: padding, shapes and graph keys.

A bucket (verl's ``pad_to_length_bucket``, R-TOTAL-2/R-TOTAL-4) rounds every micro-batch's
packed total up to a multiple of the bucket. That adds up to one bucket of padding rows per
micro-batch and caps the distinct row counts, but not the graph keys: ``cu_seqlens*`` and
``max_seqlen`` still change with every micro-batch unless the metadata is static too
(``max_num_seqs``, ``max_seqlen="total"``). All arithmetic goes through ``plan_thd``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .graph_keys import graph_key
from .settings import PackSettings
from .static import arith_module, try_plan

DEFAULT_BUCKETS: tuple[int | None, ...] = (None, 128, 256, 512, 1024, 2048, 4096, 8192)


@dataclass
class BucketReport:
    """One candidate bucket over all simulated micro-batches."""

    bucket: int | None
    micro_batches: int
    real_tokens: int
    align_rows: int  # rows added without a bucket: per-sequence alignment, FP8 total, floor
    bucket_rows: int  # rows the bucket adds on top
    align_pct: float
    bucket_pct: float
    total_pct: float
    distinct_shapes: int  # distinct per-rank row counts (local_rows)
    worst_local_rows: int
    worst_total: int
    shapes: list[int] = field(default_factory=list)
    graph_keys: int = 0  # distinct graph keys (bench.graph_keys) of the plans as they are
    static_graph_keys: int | None = None  # the same with max_num_seqs and max_seqlen="total"
    static_overflows: int = 0  # micro-batches that max_num_seqs refuses (not in the keys)

    @property
    def label(self) -> str:
        return "none" if self.bucket is None else str(self.bucket)


def evaluate(batches: Sequence[Sequence[int]], settings: PackSettings,
             buckets: Sequence[int | None] = DEFAULT_BUCKETS,
             arith: str = "impl", max_num_seqs: int | None = None) -> list[BucketReport]:
    """Plan every micro-batch with and without each bucket through ``plan_thd``.

    Percentages are padding rows over real tokens, summed over all micro-batches. The no-bucket
    plan's padding is the alignment part (R-ALIGN-3, plus R-TOTAL-1/R-TOTAL-3 when set); the
    bucket part is what each bucket adds on top (R-TOTAL-2, R-TOTAL-4). With ``max_num_seqs``
    each bucket is also planned with static metadata (R-STATIC-1, R-STATIC-2) to count the
    graph keys that remain; zero-length entries add no rows, so the padding is the same.
    """
    if not batches:
        raise ValueError("no micro-batches to evaluate")
    mod = arith_module(arith)

    def plan(lengths: Sequence[int], bucket: int | None) -> Any:
        return mod.plan_thd(list(lengths), mod.PackConfig(**settings.config_kwargs(bucket)))

    static = None if max_num_seqs is None else \
        settings.replace(max_num_seqs=max_num_seqs, max_seqlen="total")
    base_plans = [plan(b, None) for b in batches]
    base = [p.total for p in base_plans]
    real_tokens = sum(sum(b) for b in batches)
    align_rows = sum(base) - real_tokens
    reports = []
    for bucket in _unique(buckets):
        plans = base_plans if bucket is None else [plan(b, bucket) for b in batches]
        totals = [p.total for p in plans]
        local = [p.local_rows for p in plans]
        bucket_rows = sum(totals) - sum(base)
        worst = max(range(len(batches)), key=lambda i: local[i])
        denom = max(real_tokens, 1)
        static_keys, overflows = None, 0
        if static is not None:
            fixed = [try_plan(mod, b, static, bucket) for b in batches]
            overflows = sum(p is None for p in fixed)
            static_keys = len({graph_key(p) for p in fixed if p is not None})
        reports.append(BucketReport(
            bucket=bucket,
            micro_batches=len(batches),
            real_tokens=real_tokens,
            align_rows=align_rows,
            bucket_rows=bucket_rows,
            align_pct=100.0 * align_rows / denom,
            bucket_pct=100.0 * bucket_rows / denom,
            total_pct=100.0 * (align_rows + bucket_rows) / denom,
            distinct_shapes=len(set(local)),
            worst_local_rows=local[worst],
            worst_total=totals[worst],
            shapes=sorted(set(local)),
            graph_keys=len({graph_key(p) for p in plans}),
            static_graph_keys=static_keys,
            static_overflows=overflows,
        ))
    return reports


def _unique(buckets: Sequence[int | None]) -> list[int | None]:
    seen: list[int | None] = []
    for b in buckets:
        if b not in seen:
            seen.append(b)
    return seen


def recommend(reports: Sequence[BucketReport], max_overhead_pct: float) -> BucketReport:
    """The bucket with the fewest distinct shapes whose added padding is within the limit.

    The limit applies to the bucket's own padding (``bucket_pct``), since alignment padding is
    paid with or without a bucket; "none" always qualifies. Ties go to the lower total overhead,
    then to the smaller bucket. Distinct shapes are the graph keys that remain once the
    metadata is static too (``static_graph_keys``, R-STATIC-3).
    """
    if not reports:
        raise ValueError("no candidate buckets")
    if not math.isfinite(max_overhead_pct) or max_overhead_pct < 0:
        raise ValueError(f"max overhead must be a finite percentage >= 0, got {max_overhead_pct}")
    eligible = [r for r in reports if r.bucket is None or r.bucket_pct <= max_overhead_pct]
    if not eligible:
        raise ValueError("no candidate is within the overhead limit; add 'none' to the buckets")
    return min(eligible, key=lambda r: (r.distinct_shapes, r.total_pct,
                                        -1 if r.bucket is None else r.bucket))


# --------------------------------------------------------------------------- output


def format_table(reports: Sequence[BucketReport], best: BucketReport | None,
                 settings: PackSettings) -> str:
    static = any(r.static_graph_keys is not None for r in reports)
    head = (f"{'bucket':>7} {'align %':>8} {'bucket %':>9} {'total %':>8} "
            f"{'shapes/rank':>11} {'graph keys':>10}"
            + (f" {'static keys':>11}" if static else "")
            + f" {'worst micro-batch (rows per rank; total)':>41}")
    lines = [head, "-" * len(head)]
    for r in reports:
        mark = "  <- recommended" if best is not None and r is best else ""
        worst = f"[{r.worst_local_rows}] x {settings.cp_size} ranks; T = {r.worst_total}"
        skeys = "" if not static else f" {_static_cell(r):>11}"
        lines.append(f"{r.label:>7} {r.align_pct:8.2f} {r.bucket_pct:9.2f} {r.total_pct:8.2f} "
                     f"{r.distinct_shapes:11d} {r.graph_keys:10d}{skeys} {worst:>41}{mark}")
    return "\n".join(lines)


def _static_cell(r: BucketReport) -> str:
    if r.static_graph_keys is None:
        return "-"
    return str(r.static_graph_keys) + (f" ({r.static_overflows} ovf)" if r.static_overflows
                                       else "")
