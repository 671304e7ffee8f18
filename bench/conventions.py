"""Packing conventions side by side (spec 1.1: ``tail``, ``seq_align``, ``fp8`` recipes; spec
1.2: ``seq_align="none"``, ``fixed_total``).

Each convention is a PackSettings; for each the planner reports the padding, distinct shapes
and graph keys without a bucket and with one common bucket, plus the ``max_num_seqs`` it
needs, and the most segments a consumer that reads boundaries from position ids derives from
one pack (R-PID-1, ``reference.segments_from_position_ids``). Every number comes from
``plan_thd`` and ``pack_thd``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import torch

import impl
from thd_packing.reference import segments_from_position_ids

from .buckets import BucketReport, evaluate
from .settings import PackSettings
from .static import MaxNumSeqsReport, recommend_max_num_seqs

TAILS = ("last", "segment")
SEQ_ALIGNS = ("tp_cp", "cp", "none")
# Micro-batches whose position-id segments are counted (each is packed on every rank).
DERIVED_SAMPLE = 16
FP8_VALUES = ("False", "True", "tensor", "mxfp8", "block", "nvfp4")


def parse_fp8(text: str) -> bool | str:
    """``False``/``True`` (verl's boolean) or a recipe name, as PackConfig takes it."""
    value = text.strip()
    if value not in FP8_VALUES:
        raise ValueError(f"fp8 must be one of {', '.join(FP8_VALUES)}, got {text!r}")
    return {"False": False, "True": True}.get(value, value)


def parse_choices(text: str, choices: Sequence[str], name: str) -> list[str]:
    """A comma-separated list of ``choices``; order kept, duplicates dropped."""
    out: list[str] = []
    for item in text.split(","):
        item = item.strip()
        if item not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {item!r}")
        if item not in out:
            out.append(item)
    return out


def convention_grid(base: PackSettings, tails: Sequence[str], seq_aligns: Sequence[str],
                    fp8s: Sequence[bool | str]) -> list[PackSettings]:
    """Every combination, the first of each list first."""
    return [base.replace(tail=t, seq_align=s, fp8=f)
            for f, s, t in product(fp8s, seq_aligns, tails)]


def fp8_label(fp8: bool | str) -> str:
    if fp8 is False:
        return "off"
    return "True" if fp8 is True else str(fp8)


@dataclass
class ConventionRow:
    """One convention: padding and keys with no bucket and with ``bucket``, and the most
    segments position ids derive from one pack (None under zigzag CP, whose ranks' rows are
    not the buffer in order)."""

    settings: PackSettings
    bucket: int | None
    none: BucketReport
    bucketed: BucketReport | None
    max_num_seqs: MaxNumSeqsReport
    derived_segments: int | None = None


def derived_segments(lengths: Sequence[int], settings: PackSettings,
                     bucket: int | None) -> int | None:
    """How many segments a position-id consumer derives from this micro-batch's pack (R-PID-1
    over impl's position ids of every rank in buffer order): the non-empty sequences plus the
    padding's segments, which grow with the padding under tail='tokens' (R-PID-3). None under
    zigzag CP."""
    if settings.cp_size > 1 and settings.cp_layout == "zigzag":
        return None
    config = impl.PackConfig(**settings.config_kwargs(bucket))
    batch = [torch.zeros(n, dtype=torch.int8) for n in lengths]
    ids = [impl.pack_thd(batch, config, rank)[1] for rank in range(settings.cp_size)]
    return len(segments_from_position_ids(torch.cat(ids).numpy())) - 1


def compare_conventions(batches: Sequence[Sequence[int]], grid: Sequence[PackSettings],
                        bucket: int | None, max_overflow_pct: float = 0.0,
                        arith: str = "impl") -> list[ConventionRow]:
    """Each convention planned over the same micro-batches, with its own ``max_num_seqs``."""
    rows = []
    for settings in grid:
        mns = recommend_max_num_seqs(batches, settings, max_overflow_pct, arith)
        buckets: list[int | None] = [None] if bucket is None else [None, bucket]
        reports = evaluate(batches, settings, buckets, arith=arith,
                           max_num_seqs=mns.max_num_seqs)
        counts = [derived_segments(b, settings, bucket) for b in batches[:DERIVED_SAMPLE]]
        known = [c for c in counts if c is not None]
        rows.append(ConventionRow(settings=settings, bucket=bucket, none=reports[0],
                                  bucketed=reports[1] if bucket is not None else None,
                                  max_num_seqs=mns,
                                  derived_segments=max(known) if known else None))
    return rows


def format_comparison(rows: Sequence[ConventionRow]) -> str:
    """One line per convention: no bucket, then the common bucket (keys as planned, static)."""
    bucket = rows[0].bucket if rows else None
    blabel = f"bucket {'none' if bucket is None else bucket}"
    left = f"{'tail':<8} {'seq_align':<9} {'fp8':<6} {'fixed':>6}"
    none_h = f"{'pad %':>6} {'shapes':>6} {'keys':>5}"
    b_h = f"{'pad %':>6} {'shapes':>6} {'keys':>5} {'static':>6}"
    head = f"{left} | {none_h} | {b_h} | {'max_num_seqs':>12} {'ovf %':>5} {'pid segs':>8}"
    top = f"{'':<{len(left)}} | {'no bucket':^{len(none_h)}} | {blabel:^{len(b_h)}} |"
    lines = [top, head, "-" * len(head)]
    for row in rows:
        s, none, b, mns = row.settings, row.none, row.bucketed, row.max_num_seqs
        cells = f"{none.total_pct:6.2f} {none.distinct_shapes:6d} {none.graph_keys:5d}"
        if b is not None:
            static = "-" if b.static_graph_keys is None else str(b.static_graph_keys)
            bcells = f"{b.total_pct:6.2f} {b.distinct_shapes:6d} {b.graph_keys:5d} {static:>6}"
        else:
            bcells = f"{'-':>6} {'-':>6} {'-':>5} {'-':>6}"
        fixed = "-" if s.fixed_total is None else str(s.fixed_total)
        segs = "-" if row.derived_segments is None else str(row.derived_segments)
        lines.append(f"{s.tail:<8} {s.seq_align:<9} {fp8_label(s.fp8):<6} {fixed:>6} | "
                     f"{cells} | {bcells} | {mns.max_num_seqs:12d} {mns.overflow_pct:5.1f} "
                     f"{segs:>8}")
    return "\n".join(lines)
