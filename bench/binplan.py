"""End-to-end planner: lengths -> bins -> packs -> buckets, for each capacity and bucket.

    python -m bench.binplan --dist lognormal --capacities 8192,16384 --tp 2 --cp 4 --dp 8
    python -m bench.binplan --lengths lengths.jsonl --capacities 16384 --buckets none,512,2048

Each training step takes `--step` sequences from the stream and bins them with `impl.bins`
(spec/bins.md) into a multiple of `--dp` micro-batches; each rank takes its bins by
`impl.bins.ranks` (R-BIN-20) and packs each with `impl.plan_thd`. For each capacity and bucket
the planner prints the padding the packs add, the micro-batches per rank and step, the
imbalance of the ranks (the busiest rank's rows over the mean, per step, worst step), the
distinct graph keys, and, side by side, what a token budget of the same number gives: how many
of its packs exceed the capacity in rows, the out-of-memory risk `cost="rows"` removes
(R-BIN-5). It ends with the config to paste: a `PackConfig` and the binning call.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import impl
from impl import bins as ib

from .graph_keys import graph_key
from .lengths import SYNTHETIC, load_lengths, synthetic_stream


@dataclass(frozen=True)
class BinReport:
    """One capacity and bucket over every simulated step."""

    capacity: int
    bucket: int | None
    cost: str
    tokens: int
    rows: int
    bins_per_rank: int  # the most micro-batches one rank runs in one step
    imbalance_pct: float  # worst step: the busiest rank's rows over the mean, less 100 %
    graph_keys: int
    over_capacity: int  # packs whose total exceeds the capacity
    packs: int

    @property
    def padding_pct(self) -> float:
        return 100.0 * (self.rows - self.tokens) / max(self.tokens, 1)


def evaluate(steps: Sequence[Sequence[int]], pack: impl.PackConfig, capacity: int,
             cost: str, algorithm: str, dp: int) -> BinReport:
    """Bin every step under one capacity and cost, pack every bin, and measure."""
    config = ib.BinConfig(capacity, algorithm=algorithm, cost=cost,
                          pack=pack if cost == "rows" else None, bins_multiple_of=dp,
                          min_bins=dp)
    tokens = rows = most = over = packs = 0
    worst = 0.0
    keys: set[tuple[tuple[str, int], ...]] = set()
    for lengths in steps:
        bins = ib.bin_lengths(list(lengths), config)
        plans = [impl.plan_thd(b, pack) for b in bins.lengths()]
        rank_rows = []
        for rank in ib.partition([p.total for p in plans], dp, equal_size=True):
            rank_rows.append(sum(plans[b].total for b in rank))
            most = max(most, len(rank))
        mean = sum(rank_rows) / dp
        worst = max(worst, 100.0 * (max(rank_rows) / mean - 1.0) if mean else 0.0)
        tokens += sum(lengths)
        rows += sum(p.total for p in plans)
        over += sum(p.total > capacity for p in plans)
        packs += len(plans)
        keys.update(graph_key(p) for p in plans)
    return BinReport(capacity, pack.bucket, cost, tokens, rows, most, worst, len(keys), over,
                     packs)


def format_table(reports: Sequence[BinReport]) -> str:
    head = (f"{'capacity':>9} {'bucket':>7} {'cost':>6} {'pad %':>7} {'mb/rank':>8} "
            f"{'imbal %':>8} {'keys':>5} {'over cap':>9}")
    lines = [head, "-" * len(head)]
    for r in reports:
        bucket = "none" if r.bucket is None else str(r.bucket)
        lines.append(f"{r.capacity:>9} {bucket:>7} {r.cost:>6} {r.padding_pct:>7.2f} "
                     f"{r.bins_per_rank:>8} {r.imbalance_pct:>8.2f} {r.graph_keys:>5} "
                     f"{r.over_capacity:>4}/{r.packs:<4}")
    return "\n".join(lines)


def config_text(pack: impl.PackConfig, report: BinReport, algorithm: str, dp: int) -> str:
    fields = {"tp_size": pack.tp_size, "cp_size": pack.cp_size, "cp_layout": pack.cp_layout,
              "bucket": pack.bucket}
    default = impl.PackConfig()
    shown = ", ".join(f"{k}={v!r}" for k, v in fields.items() if getattr(default, k) != v)
    return (f"pack = PackConfig({shown})\n"
            f"config = BinConfig(capacity={report.capacity}, algorithm={algorithm!r}, "
            f"cost='rows', pack=pack, bins_multiple_of={dp}, min_bins={dp})\n"
            f"bins = bin_lengths(step_lengths, config)   # impl.bins\n"
            f"rank_bins = ranks(bins, config, dp_size={dp})[dp_rank]")


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma list of integers, got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"every value must be >= 1, got {text!r}")
    return values


def _buckets(text: str) -> list[int | None]:
    return [None if x == "none" else _ints(x)[0] for x in text.split(",")]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.binplan", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--lengths", metavar="FILE", help=".jsonl, .csv or .npy of lengths")
    src.add_argument("--dist", choices=SYNTHETIC, help="a named synthetic distribution")
    p.add_argument("--max-len", type=int, default=4096, help="synthetic: longest sequence")
    p.add_argument("--seed", type=int, default=0, help="synthetic: RNG seed")
    p.add_argument("--capacities", type=_ints, required=True,
                   help="comma list of capacities (rows of one pack, or tokens)")
    p.add_argument("--buckets", type=_buckets, default=[None, 512, 2048])
    p.add_argument("--algorithm", choices=ib.ALGORITHMS, default="first_fit_decreasing")
    p.add_argument("--step", type=int, default=4096, help="sequences per training step")
    p.add_argument("--steps", type=int, default=8, help="training steps to simulate")
    p.add_argument("--dp", type=int, default=1, help="data-parallel size")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.lengths is not None:
            stream = iter(load_lengths(args.lengths))
        else:
            stream = synthetic_stream(args.dist, max_len=args.max_len, seed=args.seed)
        steps = [list(itertools.islice(stream, args.step)) for _ in range(args.steps)]
        steps = [s for s in steps if s]
        reports = []
        for capacity, bucket in itertools.product(args.capacities, args.buckets):
            pack = impl.PackConfig(tp_size=args.tp, cp_size=args.cp, cp_layout=args.layout,
                                   bucket=bucket)
            for cost in ("rows", "tokens"):
                reports.append(evaluate(steps, pack, capacity, cost, args.algorithm, args.dp))
    except (ValueError, TypeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(steps)} steps of {args.step} sequences; {args.algorithm}; dp={args.dp} "
          f"tp={args.tp} cp={args.cp} {args.layout}")
    print(format_table(reports))
    print("\npad %: padding rows over real tokens; mb/rank: micro-batches per rank and step "
          "(most); imbal %: busiest rank's rows over the mean (worst step); keys: distinct "
          "graph keys; over cap: packs whose rows exceed the capacity.")
    rows_reports = [r for r in reports if r.cost == "rows"]
    best = min(rows_reports, key=lambda r: (r.padding_pct + r.imbalance_pct, r.graph_keys))
    pack = impl.PackConfig(tp_size=args.tp, cp_size=args.cp, cp_layout=args.layout,
                           bucket=best.bucket)
    print("\nrecommended (least padding plus imbalance under cost='rows'):")
    print(config_text(pack, best, args.algorithm, args.dp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
