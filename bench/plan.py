"""Bucket planner: what a shape bucket costs in padding and buys in distinct packed shapes.

    python -m bench.plan --dist lognormal --tokens-per-mb 16384 --cp 4 --max-overhead 5
    python -m bench.plan --lengths lengths.jsonl --tokens-per-mb 32768 --plot tradeoff.png

A bucket (verl's ``pad_to_length_bucket``, R-TOTAL-2/R-TOTAL-4) rounds every micro-batch's
packed total up to a multiple of the bucket. That adds up to one bucket of padding rows per
micro-batch but caps the number of distinct packed shapes, and with them JIT and cuDNN
recompiles. The planner simulates micro-batches from a length distribution and reports both
sides for every candidate bucket. All arithmetic goes through ``plan_thd`` (impl by default),
never through a copy of the spec's formulas.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from .lengths import SYNTHETIC, load_lengths, synthetic_stream

DEFAULT_BUCKETS: tuple[int | None, ...] = (None, 128, 256, 512, 1024, 2048, 4096, 8192)


# --------------------------------------------------------------------------- micro-batching


def greedy_microbatches(lengths: Iterable[int], budget: int, limit: int) -> list[list[int]]:
    """Sequential greedy packing: append samples in order while the real tokens fit the budget.

    This is what a data loader that never reorders does. At most ``limit`` micro-batches.
    """
    _check_budget(budget, limit)
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for index, length in enumerate(lengths):
        _check_fits(index, length, budget)
        if current and tokens + length > budget:
            batches.append(current)
            if len(batches) == limit:
                return batches
            current, tokens = [], 0
        current.append(length)
        tokens += length
    if current and len(batches) < limit:
        batches.append(current)
    return batches


def balanced_microbatches(lengths: Iterable[int], budget: int, limit: int,
                          window: int = 256) -> list[list[int]]:
    """Balanced packing, as dynamic-batch-size trainers do for each mini-batch.

    Every ``window`` samples (one mini-batch) are split into the fewest micro-batches ``k >=
    ceil(tokens / budget)`` for which a longest-first, least-loaded assignment keeps each under
    the budget. Samples keep their original order inside a micro-batch.
    """
    _check_budget(budget, limit)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    batches: list[list[int]] = []
    iterator = iter(lengths)
    offset = 0
    while len(batches) < limit:
        chunk = list(itertools.islice(iterator, window))
        if not chunk:
            break
        for index, length in enumerate(chunk):
            _check_fits(offset + index, length, budget)
        offset += len(chunk)
        batches.extend(_balance(chunk, budget))
    return batches[:limit]


def _balance(chunk: list[int], budget: int) -> list[list[int]]:
    order = sorted(range(len(chunk)), key=lambda i: -chunk[i])
    k = max(1, math.ceil(sum(chunk) / budget))
    while True:
        loads = [0] * k
        members: list[list[int]] = [[] for _ in range(k)]
        for i in order:
            target = min(range(k), key=loads.__getitem__)
            loads[target] += chunk[i]
            members[target].append(i)
        if max(loads) <= budget:
            return [[chunk[i] for i in sorted(m)] for m in members if m]
        k += 1


def _check_budget(budget: int, limit: int) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"tokens per micro-batch must be an integer >= 1, got {budget!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"number of micro-batches must be an integer >= 1, got {limit!r}")


def _check_fits(index: int, length: int, budget: int) -> None:
    if length > budget:
        raise ValueError(
            f"sample {index} has {length} tokens, more than the token budget {budget} per "
            f"micro-batch; raise --tokens-per-mb"
        )


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class PackSettings:
    """The static packing parameters except the bucket (R-IN-3)."""

    tp_size: int = 1
    cp_size: int = 1
    cp_layout: str = "zigzag"
    fp8: bool = False
    min_local_rows: int | None = None


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

    @property
    def label(self) -> str:
        return "none" if self.bucket is None else str(self.bucket)


def _arith(name: str) -> ModuleType:
    """The module whose ``plan_thd``/``PackConfig`` do the arithmetic (impl or reference)."""
    if name not in ("impl", "reference"):
        raise ValueError(f"arithmetic backend must be 'impl' or 'reference', got {name!r}")
    return importlib.import_module(name)


def evaluate(batches: Sequence[Sequence[int]], settings: PackSettings,
             buckets: Sequence[int | None] = DEFAULT_BUCKETS,
             arith: str = "impl") -> list[BucketReport]:
    """Plan every micro-batch with and without each bucket through ``plan_thd``.

    Percentages are padding rows over real tokens, summed over all micro-batches. The no-bucket
    plan's padding is the alignment part (R-ALIGN-3, plus R-TOTAL-1/R-TOTAL-3 when set); the
    bucket part is what each bucket adds on top (R-TOTAL-2, R-TOTAL-4).
    """
    if not batches:
        raise ValueError("no micro-batches to evaluate")
    mod = _arith(arith)

    def plan(lengths: Sequence[int], bucket: int | None) -> Any:
        config = mod.PackConfig(bucket=bucket, **asdict(settings))
        return mod.plan_thd(list(lengths), config)

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
    then to the smaller bucket.
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
    head = (f"{'bucket':>7} {'align %':>8} {'bucket %':>9} {'total %':>8} "
            f"{'shapes/rank':>11} {'worst micro-batch (rows per rank; total)':>41}")
    lines = [head, "-" * len(head)]
    for r in reports:
        mark = "  <- recommended" if best is not None and r is best else ""
        worst = f"[{r.worst_local_rows}] x {settings.cp_size} ranks; T = {r.worst_total}"
        lines.append(f"{r.label:>7} {r.align_pct:8.2f} {r.bucket_pct:9.2f} {r.total_pct:8.2f} "
                     f"{r.distinct_shapes:11d} {worst:>41}{mark}")
    return "\n".join(lines)


def plot(reports: Sequence[BucketReport], best: BucketReport | None, out: str) -> None:
    """Overhead against distinct shapes, one labelled point per bucket."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib (pip install matplotlib)") from exc
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    xs = [r.total_pct for r in reports]
    ys = [r.distinct_shapes for r in reports]
    ax.plot(xs, ys, "o-", color="tab:blue")
    for r in reports:
        ax.annotate(r.label, (r.total_pct, r.distinct_shapes), textcoords="offset points",
                    xytext=(5, 5), fontsize=8)
    if best is not None:
        ax.plot([best.total_pct], [best.distinct_shapes], "*", color="tab:red", markersize=14,
                label=f"recommended: {best.label}")
        ax.legend()
    ax.set_xlabel("padded rows, % over real tokens (alignment + bucket)")
    ax.set_ylabel("distinct packed shapes per rank")
    ax.set_yscale("log")
    ax.set_title("Bucket trade-off")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- CLI


def _bucket_list(text: str) -> list[int | None]:
    out: list[int | None] = []
    for item in text.split(","):
        item = item.strip().lower()
        if item in ("none", "off", "0"):
            out.append(None)
            continue
        try:
            value = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bucket {item!r} is not an integer or 'none'") \
                from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"bucket {value} must be >= 1 (or 'none')")
        out.append(value)
    return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.plan",
        description="Choose a THD shape bucket: padding overhead vs distinct packed shapes.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--lengths", metavar="FILE",
                     help="per-sample lengths: .jsonl (ints or objects), .csv or .npy")
    src.add_argument("--dist", choices=SYNTHETIC, help="a named synthetic distribution")
    p.add_argument("--jsonl-key", default="length", help="JSONL object key (default: length)")
    p.add_argument("--csv-column", default="length", help="CSV header column (default: length)")
    p.add_argument("--max-len", type=_positive, default=4096,
                   help="synthetic: longest sample (default 4096)")
    p.add_argument("--seed", type=int, default=0, help="synthetic: RNG seed")
    p.add_argument("--tokens-per-mb", type=_positive, required=True,
                   help="token budget per micro-batch (real tokens)")
    p.add_argument("--mode", choices=("greedy", "balanced"), default="greedy",
                   help="greedy sequential packing, or balanced per mini-batch window")
    p.add_argument("--window", type=_positive, default=256,
                   help="balanced: samples per mini-batch (default 256)")
    p.add_argument("--micro-batches", type=_positive, default=256,
                   help="micro-batches to simulate (default 256)")
    p.add_argument("--tp", type=_positive, default=1, help="tensor-parallel size")
    p.add_argument("--cp", type=_positive, default=1, help="context-parallel size")
    p.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag",
                   help="CP layout (default zigzag)")
    p.add_argument("--fp8", action="store_true", help="FP8 padding (verl's use_fp8_padding)")
    p.add_argument("--min-local-rows", type=_positive, default=None,
                   help="floor on rows per rank")
    p.add_argument("--buckets", type=_bucket_list, default=list(DEFAULT_BUCKETS),
                   help="comma-separated candidates, 'none' for no bucket "
                        "(default none,128,...,8192)")
    p.add_argument("--max-overhead", type=float, default=5.0,
                   help="most padding a bucket may add, %% of real tokens (default 5)")
    p.add_argument("--arith", choices=("impl", "reference"), default="impl",
                   help="which plan_thd does the arithmetic (default impl)")
    p.add_argument("--plot", metavar="OUT.png", help="draw the trade-off curve (matplotlib)")
    p.add_argument("--json", metavar="OUT.json", help="write the reports as JSON")
    p.add_argument("--measure-compile", action="store_true",
                   help="also torch.compile a small packed module, with and without the "
                        "recommended bucket, and count graphs and compile time")
    p.add_argument("--compile-micro-batches", type=_positive, default=16,
                   help="micro-batches fed to the compiled module (default 16)")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile backend for --measure-compile (default inductor; "
                        "aot_eager is much faster)")
    return p


def simulate(args: argparse.Namespace) -> list[list[int]]:
    """The micro-batches the arguments describe."""
    stream: Iterator[int] | list[int]
    if args.lengths is not None:
        stream = load_lengths(args.lengths, jsonl_key=args.jsonl_key, csv_column=args.csv_column)
    else:
        stream = synthetic_stream(args.dist, max_len=args.max_len, seed=args.seed)
    if args.mode == "greedy":
        return greedy_microbatches(stream, args.tokens_per_mb, args.micro_batches)
    return balanced_microbatches(stream, args.tokens_per_mb, args.micro_batches, args.window)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = PackSettings(tp_size=args.tp, cp_size=args.cp, cp_layout=args.layout,
                                fp8=args.fp8, min_local_rows=args.min_local_rows)
        batches = simulate(args)
        reports = evaluate(batches, settings, args.buckets, arith=args.arith)
        best = recommend(reports, args.max_overhead)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source = args.lengths or f"{args.dist} (max_len {args.max_len}, seed {args.seed})"
    print(f"lengths: {source}; {len(batches)} micro-batches ({args.mode}, "
          f"{args.tokens_per_mb} tokens each); tp={args.tp} cp={args.cp} {args.layout}"
          f"{' fp8' if args.fp8 else ''}"
          f"{f' min_local_rows={args.min_local_rows}' if args.min_local_rows else ''}")
    print(format_table(reports, best, settings))
    print("\nalign %: rows added without a bucket (per-sequence alignment, plus FP8 total and "
          "min_local_rows when set); bucket %: rows the bucket adds on top.")
    print(f"recommended bucket: {best.label} ({best.distinct_shapes} distinct shapes, bucket adds "
          f"{best.bucket_pct:.2f}% <= {args.max_overhead:g}%)")
    payload: dict[str, Any] = {"settings": asdict(settings), "source": source,
                               "mode": args.mode, "tokens_per_mb": args.tokens_per_mb,
                               "reports": [asdict(r) for r in reports],
                               "recommended": best.bucket}
    if args.measure_compile:
        from .compile_probe import measure_compile

        chosen = [None] if best.bucket is None else [None, best.bucket]
        results = measure_compile(batches[: args.compile_micro_batches], settings, chosen,
                                  backend=args.compile_backend, arith=args.arith)
        print(f"\ntorch.compile(dynamic=False, backend={args.compile_backend!r}) over "
              f"{min(len(batches), args.compile_micro_batches)} micro-batches:")
        for res in results:
            print(f"  bucket {res['label']:>5}: {res['graphs']:3d} compiled graphs, "
                  f"compile {res['compile_s']:.2f} s, all calls {res['total_s']:.2f} s")
        payload["compile"] = results
    if args.plot:
        try:
            plot(reports, best, args.plot)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"plot written to {args.plot}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
