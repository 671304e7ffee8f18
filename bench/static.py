"""Choosing ``max_num_seqs`` (R-STATIC-1, R-ERR-13) from a length distribution.

With ``max_num_seqs = N`` every plan has N entries, so ``cu_seqlens*`` keep one shape; a
micro-batch that needs more entries is refused (ValueError, before any data is read) and the
trainer must split it or fall back to a plan without static metadata. The planner therefore
reports, for each candidate N, the share of micro-batches that would overflow it. Which N a
micro-batch needs (B, or B + 1 where ``tail="segment"`` reserves an entry) is asked of
``plan_thd`` itself, never re-derived here.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .settings import PackSettings


def arith_module(name: str) -> ModuleType:
    """The module whose ``plan_thd``/``PackConfig`` do the arithmetic (impl or reference)."""
    if name not in ("impl", "reference"):
        raise ValueError(f"arithmetic backend must be 'impl' or 'reference', got {name!r}")
    return importlib.import_module({"impl": "impl", "reference": "thd_packing.reference"}[name])


def try_plan(mod: ModuleType, lengths: Sequence[int], settings: PackSettings,
             bucket: int | None) -> Any | None:
    """The plan, or None where ``max_num_seqs`` refuses the micro-batch (R-ERR-13)."""
    config = mod.PackConfig(**settings.config_kwargs(bucket))
    try:
        return mod.plan_thd(list(lengths), config)
    except ValueError as exc:
        if settings.max_num_seqs is not None and "max_num_seqs" in str(exc):
            return None
        raise


def entries_needed(mod: ModuleType, lengths: Sequence[int], settings: PackSettings) -> int:
    """The smallest ``max_num_seqs`` that plan_thd accepts for this micro-batch."""
    b = len(lengths)
    for n in (max(b, 1), b + 1):
        if try_plan(mod, lengths, settings.replace(max_num_seqs=n), None) is not None:
            return n
    raise ValueError(f"plan_thd refuses max_num_seqs={b + 1} for B={b}: not R-ERR-13's rule")


@dataclass
class MaxNumSeqsReport:
    """The recommended N and the overflow rate of other candidates."""

    max_num_seqs: int
    overflow_pct: float  # micro-batches that N refuses, % of all
    max_overflow_pct: float  # the limit it was chosen under
    micro_batches: int
    needed: list[int] = field(default_factory=list)  # per micro-batch
    candidates: list[tuple[int, float]] = field(default_factory=list)  # (N, overflow %)


def overflow_pct(needed: Sequence[int], n: int) -> float:
    return 100.0 * sum(1 for k in needed if k > n) / max(len(needed), 1)


def recommend_max_num_seqs(batches: Sequence[Sequence[int]], settings: PackSettings,
                           max_overflow_pct: float = 0.0,
                           arith: str = "impl") -> MaxNumSeqsReport:
    """The smallest N whose overflow rate is at most ``max_overflow_pct`` percent.

    No bucket is asked for: the entries a micro-batch needs do not depend on it (R-ERR-13
    reads B and tail only).
    """
    if not batches:
        raise ValueError("no micro-batches to size max_num_seqs for")
    if not math.isfinite(max_overflow_pct) or not 0 <= max_overflow_pct < 100:
        raise ValueError(f"max overflow must be a percentage in [0, 100), got "
                         f"{max_overflow_pct}")
    mod = arith_module(arith)
    base = settings.replace(max_num_seqs=None, max_seqlen="exact")
    needed = [entries_needed(mod, b, base) for b in batches]
    ordered = sorted(set(needed))
    best = next(n for n in ordered if overflow_pct(needed, n) <= max_overflow_pct)
    picks = sorted({best, *(_quantile(needed, q) for q in (0.5, 0.9, 0.99)), ordered[-1]})
    return MaxNumSeqsReport(
        max_num_seqs=best, overflow_pct=overflow_pct(needed, best),
        max_overflow_pct=max_overflow_pct, micro_batches=len(batches), needed=needed,
        candidates=[(n, overflow_pct(needed, n)) for n in picks])


def _quantile(values: Sequence[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def format_max_num_seqs(report: MaxNumSeqsReport) -> str:
    cands = ", ".join(f"{n} -> {pct:.1f}%" for n, pct in report.candidates)
    return (f"recommended max_num_seqs: {report.max_num_seqs} (overflows "
            f"{report.overflow_pct:.1f}% of {report.micro_batches} micro-batches, limit "
            f"{report.max_overflow_pct:g}%); entries needed per micro-batch "
            f"{min(report.needed)}..{max(report.needed)}; overflow rate by N: {cands}")


FA2_BLOCK_M = 128  # flash-attn 2's forward kBlockM for head dims 64/128 (facts14.md (b))


@dataclass
class MaxSeqlenCost:
    """What ``max_seqlen="total"`` costs against ``"exact"``, per micro-batch (means).

    ``grid_*``: flash-attn 2's forward launch grid per head, ``K * ceil(max_seqlen / 128)``
    CTAs, of which only ``working`` (``sum ceil(P_k / 128)``) do work, the rest exiting at
    once. ``scores_*``: ``K * max_seqlen**2``, the score elements of a padded-batch consumer
    (TE's unfused backend, this repository's CPU stand-in). Read from the plans; no kernel ran.
    """

    bucket: int | None
    max_num_seqs: int
    exact_max_seqlen: float
    total_max_seqlen: float
    grid_exact: float
    grid_total: float
    working: float
    scores_exact: float
    scores_total: float


def max_seqlen_cost(batches: Sequence[Sequence[int]], settings: PackSettings,
                    bucket: int | None, max_num_seqs: int,
                    arith: str = "impl") -> MaxSeqlenCost:
    """Means over the micro-batches that ``max_num_seqs`` accepts."""
    mod = arith_module(arith)
    exact = settings.replace(max_num_seqs=None, max_seqlen="exact")
    static = settings.replace(max_num_seqs=max_num_seqs, max_seqlen="total")
    kept: list[tuple[Any, Any]] = []
    for b in batches:
        fixed = try_plan(mod, b, static, bucket)
        if fixed is not None:
            kept.append((try_plan(mod, b, exact, bucket), fixed))
    if not kept:
        raise ValueError(f"max_num_seqs={max_num_seqs} refuses every micro-batch")

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    def grid(p: Any) -> float:
        return (len(p.cu_seqlens_padded) - 1) * -(-int(p.max_seqlen) // FA2_BLOCK_M)

    def scores(p: Any) -> float:
        return (len(p.cu_seqlens_padded) - 1) * int(p.max_seqlen) ** 2

    return MaxSeqlenCost(
        bucket=bucket, max_num_seqs=max_num_seqs,
        exact_max_seqlen=mean([int(e.max_seqlen) for e, _ in kept]),
        total_max_seqlen=mean([int(s.max_seqlen) for _, s in kept]),
        grid_exact=mean([grid(e) for e, _ in kept]),
        grid_total=mean([grid(s) for _, s in kept]),
        working=mean([float(sum(-(-int(n) // FA2_BLOCK_M) for n in e.seqlens_padded))
                      for e, _ in kept]),
        scores_exact=mean([scores(e) for e, _ in kept]),
        scores_total=mean([scores(s) for _, s in kept]))


def format_max_seqlen_cost(c: MaxSeqlenCost) -> str:
    label = "none" if c.bucket is None else str(c.bucket)
    return (f"max_seqlen 'total' vs 'exact' (bucket {label}, max_num_seqs {c.max_num_seqs}; "
            f"means per micro-batch, from the plans): max_seqlen {c.total_max_seqlen:.0f} vs "
            f"{c.exact_max_seqlen:.0f}; flash-attn 2 forward CTAs per head "
            f"{c.grid_total:.0f} vs {c.grid_exact:.0f} launched, {c.working:.0f} working; "
            f"padded-batch score elements x{c.scores_total / max(c.scores_exact, 1):.1f}")
