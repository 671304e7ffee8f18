"""Bucket planner: what a shape bucket costs in padding and buys in distinct packed shapes.

    python -m bench.plan --dist lognormal --tokens-per-mb 16384 --cp 4 --max-overhead 5
    python -m bench.plan --lengths lengths.jsonl --tokens-per-mb 32768 --plot tradeoff.png

A bucket (verl's ``pad_to_length_bucket``, R-TOTAL-2/R-TOTAL-4) rounds every micro-batch's
packed total up to a multiple of the bucket. That adds up to one bucket of padding rows per
micro-batch but caps the number of distinct packed shapes; with static metadata
(``max_num_seqs``, ``max_seqlen="total"``) it caps the graph keys, and with them JIT and cuDNN
recompiles. The planner simulates micro-batches from a length distribution, reports both sides
for every candidate bucket, and prints its choice as ``PackConfig(...)`` and as verl's engine
YAML keys. All arithmetic goes through ``plan_thd`` (impl by default), never through a copy of
the spec's formulas.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from .buckets import DEFAULT_BUCKETS, BucketReport, evaluate, format_table, recommend
from .conventions import (
    SEQ_ALIGNS,
    TAILS,
    compare_conventions,
    convention_grid,
    format_comparison,
    parse_choices,
    parse_fp8,
)
from .lengths import SYNTHETIC, load_lengths, synthetic_stream
from .microbatches import balanced_microbatches, greedy_microbatches
from .recommendation import (
    format_recommendation,
    packconfig_text,
    recommended_config,
    verl_engine_keys,
)
from .settings import PackSettings
from .static import (
    arith_module,
    format_max_num_seqs,
    format_max_seqlen_cost,
    max_seqlen_cost,
    overflow_pct,
    recommend_max_num_seqs,
)

__all__ = ["DEFAULT_BUCKETS", "BucketReport", "PackSettings", "balanced_microbatches",
           "evaluate", "format_table", "greedy_microbatches", "main", "recommend"]


def plot_series(reports: Sequence[BucketReport]) -> dict[str, list[int | None]]:
    """What the plot draws against padding, per bucket: row shapes per rank, and the graph keys
    as planned and with static metadata (None where max_num_seqs was not evaluated)."""
    return {"row shapes per rank": [r.distinct_shapes for r in reports],
            "graph keys, metadata as planned": [r.graph_keys for r in reports],
            "graph keys, static metadata": [r.static_graph_keys for r in reports]}


def plot(reports: Sequence[BucketReport], best: BucketReport | None, out: str,
         config_text: str = "") -> list[str]:
    """Row shapes and graph keys against padding, one labelled point per bucket, and the
    config to paste underneath; returns the labels of the series drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib (pip install matplotlib)") from exc
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.8), sharey=True)
    xs = [r.total_pct for r in reports]
    series = plot_series(reports)
    drawn = []
    for ax, names, title in ((left, ["row shapes per rank"], "Row shapes (bucket alone)"),
                             (right, ["graph keys, metadata as planned",
                                      "graph keys, static metadata"],
                              "Graph keys (what recompiles)")):
        for name, style in zip(names, ("o-", "s--"), strict=False):
            points = [(x, y) for x, y in zip(xs, series[name], strict=True) if y is not None]
            if points:
                ax.plot(*zip(*points, strict=True), style, label=name)
                drawn.append(name)
        for r, y in zip(reports, series[names[-1]], strict=True):
            if y is not None:
                ax.annotate(r.label, (r.total_pct, y), textcoords="offset points",
                            xytext=(5, 5), fontsize=8)
        if best is not None:
            ax.plot([best.total_pct], [best.distinct_shapes if ax is left else
                                       best.static_graph_keys or best.graph_keys],
                    "*", color="tab:red", markersize=14,
                    label=f"recommended bucket: {best.label}")
        ax.legend(fontsize=8)
        ax.set_xlabel("padded rows, % over real tokens (alignment + bucket)")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    left.set_ylabel("distinct values over the micro-batches")
    if config_text:
        fig.text(0.01, 0.01, config_text, fontsize=7, family="monospace")
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return drawn


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


def _choices(choices: Sequence[str], name: str) -> Any:
    def parse(text: str) -> list[str]:
        try:
            return parse_choices(text, choices, name)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def _fp8_list(text: str) -> list[bool | str]:
    try:
        return [parse_fp8(item) for item in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _max_num_seqs(text: str) -> int | None:
    if text.strip().lower() == "auto":
        return None
    return _positive(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.plan",
        description="Choose a THD shape bucket and max_num_seqs: padding overhead vs distinct "
                    "packed shapes and graph keys, per packing convention.")
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
    p.add_argument("--fp8", type=_fp8_list, nargs="?", const=[True], default=[False],
                   metavar="RECIPE",
                   help="FP8 padding: False, True (verl's use_fp8_padding; also bare --fp8), "
                        "tensor, mxfp8, block or nvfp4; a comma list compares them")
    p.add_argument("--tail", type=_choices(TAILS, "tail"), default=["last"],
                   help="where T - S goes: last (on the last sequence) or segment (its own "
                        "trailing segment); a comma list compares them")
    p.add_argument("--seq-align", type=_choices(SEQ_ALIGNS, "seq_align"), default=["tp_cp"],
                   help="per-sequence alignment base: tp_cp (verl), cp (Megatron-LM) or none "
                        "(Ulysses, ring attention: contiguous layout or cp 1); a comma list "
                        "compares them")
    p.add_argument("--fixed-total", type=_positive, default=None, metavar="N",
                   help="every pack exactly N rows (Megatron-LM's --seq-length, torchtune's "
                        "max_seq_len; spec R-TOTAL-7): replaces the buckets")
    p.add_argument("--min-local-rows", type=_positive, default=None,
                   help="floor on rows per rank")
    p.add_argument("--buckets", type=_bucket_list, default=list(DEFAULT_BUCKETS),
                   help="comma-separated candidates, 'none' for no bucket "
                        "(default none,128,...,8192)")
    p.add_argument("--max-overhead", type=float, default=5.0,
                   help="most padding a bucket may add, %% of real tokens (default 5)")
    p.add_argument("--max-num-seqs", type=_max_num_seqs, default=None, metavar="N|auto",
                   help="static entry count to evaluate (default auto: the recommendation)")
    p.add_argument("--max-overflow", type=float, default=0.0,
                   help="auto max_num_seqs: most micro-batches it may refuse, %% (default 0)")
    p.add_argument("--compare-bucket", type=_bucket_list, default=None,
                   help="bucket for the convention comparison (default: the recommended one)")
    p.add_argument("--arith", choices=("impl", "reference"), default="impl",
                   help="which plan_thd does the arithmetic (default impl)")
    p.add_argument("--plot", metavar="OUT.png", help="draw the trade-off curve (matplotlib)")
    p.add_argument("--json", metavar="OUT.json", help="write the reports as JSON")
    p.add_argument("--measure-compile", action="store_true",
                   help="also torch.compile a varlen-attention probe (bench.compile_probe): no "
                        "bucket, the recommended bucket, and it with static metadata")
    p.add_argument("--compile-micro-batches", type=_positive, default=16,
                   help="micro-batches fed to the compiled module (default 16)")
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile backend for --measure-compile (default inductor; "
                        "aot_eager is much faster)")
    return p


def check_fixed_total(batches: Sequence[Sequence[int]], settings: PackSettings,
                      arith: str) -> None:
    """With a fixed total: ValueError naming how many micro-batches need more (R-ERR-15) and
    the smallest fixed total that holds them all, rather than the first refusal."""
    if settings.fixed_total is None:
        return
    mod = arith_module(arith)
    free = mod.PackConfig(**settings.replace(fixed_total=None).config_kwargs(None))
    mod.PackConfig(**settings.config_kwargs(None))  # R-ERR-14: N a multiple of M
    needed = [mod.plan_thd(list(b), free).total for b in batches]
    over = sum(t > settings.fixed_total for t in needed)
    if over:
        raise ValueError(f"fixed_total={settings.fixed_total} is too small for {over} of "
                         f"{len(needed)} micro-batches ({settings.convention}); the smallest "
                         f"that holds them all is {max(needed)}")


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
    base = PackSettings(tp_size=args.tp, cp_size=args.cp, cp_layout=args.layout,
                        min_local_rows=args.min_local_rows, fixed_total=args.fixed_total)
    grid = convention_grid(base, args.tail, args.seq_align, args.fp8)
    settings = grid[0]
    if args.fixed_total is not None:  # exclusive with a bucket (R-TOTAL-7)
        args.buckets, args.compare_bucket = [None], None
    try:
        batches = simulate(args)
        for each in grid:
            check_fixed_total(batches, each, args.arith)
        mns = recommend_max_num_seqs(batches, settings, args.max_overflow, args.arith)
        n = mns.max_num_seqs if args.max_num_seqs is None else args.max_num_seqs
        reports = evaluate(batches, settings, args.buckets, arith=args.arith, max_num_seqs=n)
        best = recommend(reports, args.max_overhead)
        cost = max_seqlen_cost(batches, settings, best.bucket, n, args.arith)
        rows = []
        if len(grid) > 1:
            cmp_bucket = best.bucket if args.compare_bucket is None else args.compare_bucket[0]
            rows = compare_conventions(batches, grid, cmp_bucket, args.max_overflow,
                                       args.arith)
    except (ValueError, TypeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    source = args.lengths or f"{args.dist} (max_len {args.max_len}, seed {args.seed})"
    print(f"lengths: {source}; {len(batches)} micro-batches ({args.mode}, "
          f"{args.tokens_per_mb} tokens each); tp={args.tp} cp={args.cp} {args.layout} "
          f"{settings.convention}"
          f"{f' min_local_rows={args.min_local_rows}' if args.min_local_rows else ''}")
    print(format_table(reports, best, settings))
    print("\nalign %: rows added without a bucket (per-sequence alignment, plus FP8 total and "
          "min_local_rows when set); bucket %: rows the bucket adds on top. graph keys: "
          "distinct (rows, len(cu_seqlens*), max_seqlen, total) as planned; static keys: the "
          f"same with max_num_seqs={n} and max_seqlen='total' (ovf: micro-batches it refuses).")
    print(f"recommended bucket: {best.label} ({best.distinct_shapes} distinct shapes, bucket adds "
          f"{best.bucket_pct:.2f}% <= {args.max_overhead:g}%)")
    print(format_max_num_seqs(mns))
    if args.max_num_seqs is not None:
        print(f"evaluated max_num_seqs: {n} (overflows {overflow_pct(mns.needed, n):.1f}%)")
    print(format_max_seqlen_cost(cost))
    config = recommended_config(settings, best.bucket, n)
    print(format_recommendation(config))
    engine_keys, no_verl_key = verl_engine_keys(config)
    payload: dict[str, Any] = {"settings": asdict(settings), "source": source,
                               "mode": args.mode, "tokens_per_mb": args.tokens_per_mb,
                               "reports": [asdict(r) for r in reports],
                               "recommended": best.bucket,
                               "max_num_seqs": {"recommended": mns.max_num_seqs,
                                                "evaluated": n,
                                                "overflow_pct": overflow_pct(mns.needed, n),
                                                "max_overflow_pct": args.max_overflow,
                                                "candidates": mns.candidates},
                               "max_seqlen_cost": asdict(cost),
                               "config": config, "packconfig": packconfig_text(config),
                               "verl_engine_keys": engine_keys, "no_verl_key": no_verl_key}
    if rows:
        print("\nconventions side by side (each with its own max_num_seqs; pad % = all "
              "padding rows over real tokens):")
        print(format_comparison(rows))
        payload["conventions"] = [
            {"settings": asdict(r.settings), "bucket": r.bucket, "no_bucket": asdict(r.none),
             "bucketed": None if r.bucketed is None else asdict(r.bucketed),
             "max_num_seqs": r.max_num_seqs.max_num_seqs,
             "overflow_pct": r.max_num_seqs.overflow_pct} for r in rows]
    if args.measure_compile:
        from .compile_probe import format_results, measure_compile

        k = min(len(batches), args.compile_micro_batches)
        results = measure_compile(batches[:k], settings, best.bucket, n,
                                  backend=args.compile_backend)
        print(f"\ntorch.compile(dynamic=False, backend={args.compile_backend!r}) of the "
              f"varlen-attention probe over {k} micro-batches:")
        print(format_results(results))
        payload["compile"] = results
    if args.plot:
        try:
            plot(reports, best, args.plot, packconfig_text(config))
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
