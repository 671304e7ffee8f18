"""The bin step's benchmark: impl's binners against the field's, side by side in one run.

    python -m bench.bins [--out reports/bench-bins.json]    # `nox -s bench_bins`

Two cases on the planner's synthetic lengths (`bench.lengths`, max 4096): a dataset of
10,000 to 1,000,000 examples and one training step of 4,096 sequences, capacity 16,384. Each
contender is timed with `torch.utils.benchmark.Timer` (one call a sample, contenders in turn,
`--repeats` samples, medians); a peer whose predicted call exceeds `--budget-s` is not run at
the next size (the prediction: 100x its time at the first size, else its measured growth).
Figures per contender: bins over Martello-Toth's L2 bound, padding rows after THD alignment
under `PackConfig(tp_size=2, cp_size=4)` (zigzag), overflow (the bins whose pack's rows exceed
the capacity given as a token budget), and for the balancers the DP imbalance (max/mean).
Benchmarks, not tests: nothing fails on a slow number. Method and table: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils import benchmark

import impl

from . import bin_peers
from .bin_peers import Binner, BinsOut, Lengths
from .lengths import SYNTHETIC, synthetic_stream

MAX_LEN = 4096
CAPACITY = 16384
PACK = impl.PackConfig(tp_size=2, cp_size=4)  # zigzag: A = 16 rows a sequence
DP = 8
SIZES = (10_000, 100_000, 1_000_000)
STEP = 4096


def lengths_of(dist: str, n: int, seed: int = 0) -> Lengths:
    return np.fromiter(islice(synthetic_stream(dist, max_len=MAX_LEN, seed=seed), n),
                       dtype=np.int64, count=n)


def l2_bound(sizes: np.ndarray, capacity: int) -> int:
    """Martello and Toth's L2 lower bound on the bins of `sizes` (each <= capacity): for each
    alpha in {0} and the sizes <= capacity // 2, the items above capacity - alpha, those in
    (capacity // 2, capacity - alpha], and the room the latter leave for the items in
    [alpha, capacity // 2]; at least L1 = ceil(sum / capacity). Vectorized over the alphas."""
    s = np.sort(np.asarray(sizes, dtype=np.int64))
    if s.size == 0:
        return 0
    prefix = np.concatenate(([0], np.cumsum(s)))
    half = capacity // 2
    alphas = np.unique(np.concatenate(([0], s[s <= half])))
    hi = np.searchsorted(s, capacity - alphas, side="right")  # items <= capacity - alpha
    mid_lo = np.searchsorted(s, half, side="right")  # items <= capacity // 2
    small_lo = np.searchsorted(s, alphas, side="left")  # items < alpha
    big = s.size - hi
    mid_n = hi - mid_lo
    mid_sum = prefix[hi] - prefix[mid_lo]
    small_sum = prefix[mid_lo] - prefix[small_lo]
    spare = mid_n * capacity - mid_sum
    extra = np.maximum(0, -((spare - small_sum) // capacity))
    return int(max(-(-int(prefix[-1]) // capacity), int((big + mid_n + extra).max())))


def plan_totals(out: BinsOut, pack: impl.PackConfig) -> np.ndarray:
    """Each bin's plan total (R-TOTAL-4) in closed form: the sum of ceil_to(L, A), rounded up
    to the total modulus; for a pack config without bucket, fixed total or minimum rows."""
    assert pack.bucket is None and pack.fixed_total is None and not pack.min_local_rows
    flat, counts = out
    a, m = pack.sequence_align, pack.total_modulus
    padded = -(-flat // a) * a
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sums = np.add.reduceat(padded, starts) if flat.size else np.zeros(0, dtype=np.int64)
    return -(-sums // m) * m


def closed_form_ok(lengths: Lengths) -> bool:
    """`plan_totals` gives impl.plan_thd's total on every bin of impl's token FFD."""
    bins = impl.bin_lengths(lengths.tolist(), impl.BinConfig(CAPACITY)).lengths()
    totals = plan_totals(bin_peers.from_values(bins), PACK)
    return [impl.plan_thd(b, PACK).total for b in bins] == totals.tolist()


def figures(binner: Binner, out: BinsOut, lengths: Lengths) -> dict[str, Any]:
    """Bins, bins over L2 (on the sizes the binner counts), padding, overflow; and whether the
    bins hold every example's tokens once (a check of the adapter, not of the peer)."""
    flat, counts = out
    totals = plan_totals(out, PACK)
    if binner.cost == "rows":
        a = PACK.sequence_align
        s_max = impl.BinConfig(CAPACITY, cost="rows", pack=PACK).limits[0]
        bound = l2_bound(-(-lengths // a) * a, s_max)
    else:
        bound = l2_bound(lengths, CAPACITY)
    tokens = int(lengths.sum())
    return {"bins": int(counts.size), "l2": bound, "bins_over_l2": counts.size / bound,
            "bins_over_l2_tokens": counts.size / l2_bound(lengths, CAPACITY),
            "padding_rows": int(totals.sum()) - tokens,
            "padding_pct": 100 * (int(totals.sum()) - tokens) / tokens,
            "fill_pct": 100 * tokens / (counts.size * CAPACITY),
            "overflow_pct": 100 * float(np.mean(totals > CAPACITY)) if counts.size else 0.0,
            "complete": bool(flat.size == lengths.size and int(flat.sum()) == tokens
                             and np.array_equal(np.sort(flat), np.sort(lengths)))}


def impl_binners() -> list[Binner]:
    def of(algorithm: str, cost: str) -> Binner:
        config = impl.BinConfig(CAPACITY, algorithm=algorithm, cost=cost,
                                pack=PACK if cost == "rows" else None)
        short = {"first_fit_decreasing": "ffd", "best_fit_decreasing": "bfd",
                 "karmarkar_karp": "kk"}[algorithm]
        return Binner(f"impl {short} {cost}", lambda x, c: x.tolist(),
                      lambda a: impl.bin_lengths(a, config),
                      lambda out, x: bin_peers.from_values(out.lengths()), cost)

    return [of("first_fit_decreasing", "tokens"), of("best_fit_decreasing", "tokens"),
            of("first_fit_decreasing", "rows")]


def time_once(fn: Callable[[], Any]) -> tuple[float, Any]:
    """One call under `torch.utils.benchmark.Timer` (GC off while timed), and its output."""
    box: dict[str, Any] = {}
    m = benchmark.Timer(stmt="box['out'] = fn()", globals={"fn": fn, "box": box},
                        num_threads=1).timeit(1)
    return m.median, box["out"]


def run_case(binners: list[Binner], lengths: Lengths, repeats: int, warm: bool,
             skip: dict[str, str], single_s: float) -> dict[str, Any]:
    """Every binner not in `skip` on the same lengths, in turn, `repeats` times; figures from
    each one's first output. `warm`: a first call not counted (the step's case), unless it took
    over `single_s`; a binner whose call took over `single_s` is called once only."""
    inputs = {b.name: b.prepare(lengths, CAPACITY) for b in binners if b.name not in skip}
    times: dict[str, list[float]] = {name: [] for name in inputs}
    result: dict[str, Any] = {}
    for b in binners:
        if warm and b.name in inputs:
            seconds, out = time_once(partial(b.call, inputs[b.name]))
            result[b.name] = figures(b, b.bins(out, lengths), lengths)
            if seconds > single_s:
                times[b.name].append(seconds)
    for _ in range(repeats):
        for b in binners:
            if b.name not in inputs or (times[b.name] and times[b.name][0] > single_s):
                continue
            seconds, out = time_once(partial(b.call, inputs[b.name]))
            times[b.name].append(seconds)
            if b.name not in result:
                result[b.name] = figures(b, b.bins(out, lengths), lengths)
            del out
    for name, samples in times.items():
        result[name].update(median_s=statistics.median(samples), samples=len(samples))
    for name, why in skip.items():
        result[name] = {"skipped": why}
    return result


def predict(seen: Sequence[tuple[int, float]], n: int) -> float:
    """A call's seconds at `n` from the (n, seconds) seen: the measured growth between the
    last two, at least linear; quadratic from a single one."""
    (n1, t1) = seen[-1]
    power = 2.0
    if len(seen) > 1 and seen[-2][1] > 0:
        (n0, t0) = seen[-2]
        power = max(math.log(t1 / t0) / math.log(n1 / n0), 1.0)
    return t1 * (n / n1) ** power


def dataset(binners: list[Binner], dists: Sequence[str], sizes: Sequence[int], repeats: int,
            budget_s: float, single_s: float, step: dict[str, Any], full_dists: Sequence[str],
            out: dict[str, Any], save: Callable[[], None]) -> None:
    """Binning n examples into `out`, n in `sizes` (above 100,000 for `full_dists` only), each
    distribution, from the step's times on: a peer stops growing once its predicted call
    exceeds `budget_s`; the micro-batch balancers bin steps only. Saves after each case."""
    for dist in dists:
        out[dist] = {}
        history: dict[str, list[tuple[int, float]]] = {}
        for n_step, case in step[dist].items():
            for name, entry in case.items():
                history[name] = [(int(n_step), entry["median_s"])]
        for n in sizes:
            if n > 100_000 and dist not in full_dists:
                continue
            skip: dict[str, str] = {}
            for b in binners:
                seen = history.get(b.name, [])
                if not b.dataset:
                    skip[b.name] = "a step balancer (memory n x bins)"
                elif seen and not b.name.startswith("impl") and predict(seen, n) > budget_s:
                    skip[b.name] = f"predicted {predict(seen, n):.0f} s > {budget_s:.0f} s"
            print(f"bins: {dist}, n = {n} ...", flush=True)
            case = run_case(binners, lengths_of(dist, n), repeats, False, skip, single_s)
            for name, entry in case.items():
                if "median_s" in entry:
                    history.setdefault(name, []).append((n, entry["median_s"]))
            out[dist][str(n)] = case
            save()


def balance(lengths: Lengths, dp: int, verl: Any, areal: Any) -> dict[str, Any]:
    """DP imbalance (max/mean of the ranks' costs). Sequences onto `dp` ranks by tokens, equal
    counts; then the rows each rank packs: verl's path (KK onto ranks, then each rank's
    `rearrange_micro_batches`) against impl's (bins in rows, a multiple of dp, then `ranks`)."""
    values = lengths.tolist()

    def ratio(costs: Sequence[float]) -> float:
        return float(max(costs) / (sum(costs) / len(costs)))

    def token_costs(parts: Sequence[Sequence[int]]) -> list[int]:
        return [int(lengths[list(p)].sum()) for p in parts]

    splitters: dict[str, Callable[[], Any]] = {
        "impl partition": lambda: impl.partition(values, dp, equal_size=True)}
    if verl is not None:
        splitters["verl get_seqlen_balanced_partitions"] = (
            lambda: verl.get_seqlen_balanced_partitions(values, dp, equal_size=True))
    if areal is not None:
        splitters["areal kk_allocate"] = (
            lambda: areal.kk_allocate(values, sum(values), dp, equal_size=True))
        splitters["areal balanced_greedy_partition"] = (
            lambda: areal.balanced_greedy_partition(values, dp))
    out: dict[str, Any] = {"tokens": {}, "rows": {}}
    for name, fn in splitters.items():
        seconds, parts = time_once(fn)
        out["tokens"][name] = {"max_over_mean": ratio(token_costs(parts)), "s": seconds}
    for algorithm in ("first_fit_decreasing", "karmarkar_karp"):
        config = impl.BinConfig(CAPACITY, algorithm=algorithm, cost="rows", pack=PACK,
                                bins_multiple_of=dp)
        seconds, bins = time_once(partial(impl.bin_lengths, values, config))
        costs = impl.bins.bin_costs(bins, config)
        per_rank = [sum(costs[b] for b in r) for r in impl.bins.ranks(bins, config, dp)]
        out["rows"][f"impl {algorithm} rows, multiple of dp, + ranks"] = {
            "max_over_mean": ratio(per_rank), "micro_batches": [len(bins.bins) // dp] * 2,
            "overflow_pct": 0.0, "s": seconds}
    if verl is not None:
        rank_rows, counts, over = [], [], 0
        for part in verl.get_seqlen_balanced_partitions(values, dp, equal_size=True):
            sub = lengths[part]
            groups = verl.rearrange_micro_batches(bin_peers.verl_batch(sub), CAPACITY)[1]
            totals = plan_totals(bin_peers.from_indices(groups, sub), PACK)
            rank_rows.append(int(totals.sum()))
            counts.append(len(groups))
            over += int((totals > CAPACITY).sum())
        out["rows"]["verl KK ranks + rearrange_micro_batches"] = {
            "max_over_mean": ratio(rank_rows), "micro_batches": [min(counts), max(counts)],
            "overflow_pct": 100 * over / sum(counts)}
    return out


def machine() -> dict[str, Any]:
    from .run import machine as run_machine

    meta = run_machine(1, "cpu")
    meta.pop("verl", None)
    meta["versions"] = {name: bin_peers.version(name) for name in
                        ("verl", "areal", "trl", "pyarrow", "binpacking", "llamafactory",
                         "numpy")}
    return meta


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def format_tables(report: dict[str, Any]) -> str:
    """Markdown: per distribution, each contender's median time and its ratio to impl ffd
    tokens at every size, the figures at each size; the step; the DP balance."""
    lines: list[str] = []
    base = "impl ffd tokens"
    for title, cases in (("step", report["step"]), ("dataset", report["dataset"])):
        lines += ["", f"{title}: median s (samples), ratio = contender / {base}; bins over L2 "
                  f"on the sizes the contender counts; padding and overflow under tp 2, cp 4; "
                  "fill = tokens / (bins x capacity)",
                  "", "| lengths | n | contender | median s | / impl | bins | bins / L2 | "
                  "padding % | fill % | overflow % |", "|---|---|---|---|---|---|---|---|---|---|"]
        for dist, sizes in cases.items():
            for n, case in sizes.items():
                ref = case.get(base, {}).get("median_s")
                for name, e in case.items():
                    if "skipped" in e:
                        lines.append(f"| {dist} | {n} | {name} | not run: {e['skipped']} "
                                     "| | | | | | |")
                        continue
                    ratio = _fmt(e["median_s"] / ref) if ref else "-"
                    lines.append(
                        f"| {dist} | {n} | {name} | {_fmt(e['median_s'])} ({e['samples']}) | "
                        f"{ratio} | {e['bins']} | {e['bins_over_l2']:.4f} | "
                        f"{e['padding_pct']:.2f} | {e['fill_pct']:.2f} | {e['overflow_pct']:.1f} |"
                        + ("" if e["complete"] else " INCOMPLETE"))
    lines += ["", f"DP balance, the step's {report['case']['step']} sequences onto {DP} ranks: "
              "max/mean of rank costs", "",
              "| lengths | cost | contender | max / mean | micro-batches a rank | "
              "overflow % |", "|---|---|---|---|---|---|"]
    for dist, entry in report["balance"].items():
        for cost in ("tokens", "rows"):
            for name, e in entry[cost].items():
                mb = "-" if "micro_batches" not in e else "{}-{}".format(*e["micro_batches"])
                over = f"{e['overflow_pct']:.1f}" if "overflow_pct" in e else "-"
                lines.append(f"| {dist} | {cost} | {name} | {e['max_over_mean']:.4f} | {mb} | "
                             f"{over} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bins", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="reports/bench-bins.json", help="JSON report path")
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--step", type=int, default=STEP, help="sequences in the step's case")
    p.add_argument("--repeats", type=int, default=3, help="timed samples per contender")
    p.add_argument("--budget-s", type=float, default=150.0,
                   help="no peer runs at a size its predicted call time exceeds this")
    p.add_argument("--single-s", type=float, default=5.0,
                   help="a contender whose call took longer is timed once")
    p.add_argument("--peers", nargs="*", default=list(bin_peers.LOADERS))
    p.add_argument("--dists", nargs="+", default=list(SYNTHETIC), choices=SYNTHETIC)
    p.add_argument("--full-dists", nargs="*", choices=SYNTHETIC,
                   help="the distributions binned above 100,000 examples (default: all)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        out.write_text(json.dumps(report, indent=1))

    peers, missing = bin_peers.load_peers(args.peers)
    meta = machine()
    meta["missing_peers"] = missing
    print(f"bench bins: {meta['date_utc']} UTC, {meta['cpu']} ({meta['cores']} cores), load "
          f"{meta['load_1m_at_start']:.1f}; {meta['versions']}; missing {missing}", flush=True)
    binners = impl_binners() + peers
    dists = [d for d in SYNTHETIC if d in args.dists]
    report: dict[str, Any] = {"meta": meta, "case": {"capacity": CAPACITY, "max_len": MAX_LEN,
                                                     "pack": repr(PACK), "dp": DP,
                                                     "step": args.step}}
    kk = impl.BinConfig(CAPACITY, algorithm="karmarkar_karp")
    step_binners = binners + [Binner("impl kk tokens", lambda x, c: x.tolist(),
                                     lambda a: impl.bin_lengths(a, kk),
                                     lambda out, x: bin_peers.from_values(out.lengths()))]
    verl = bin_peers.load_verl() if "verl" not in missing and "verl" in args.peers else None
    areal = bin_peers.load_areal() if "areal" not in missing and "areal" in args.peers else None
    report["step"], report["balance"] = {}, {}
    for dist in dists:
        print(f"bins: step, {dist} ...", flush=True)
        lengths = lengths_of(dist, args.step, seed=1)
        meta.setdefault("checks", {})[f"closed-form totals = plan_thd ({dist})"] = closed_form_ok(
            lengths)
        report["step"][dist] = {str(args.step): run_case(
            step_binners, lengths, args.repeats, True, {}, args.single_s)}
        report["balance"][dist] = balance(lengths, DP, verl, areal)
        save()
    report["dataset"] = {}
    dataset(binners, dists, args.sizes, args.repeats, args.budget_s, args.single_s,
            report["step"], args.full_dists or dists, report["dataset"], save)
    meta["load_1m_at_end"] = os.getloadavg()[0]
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    print(format_tables(report))
    save()
    print(f"wrote {out} ({meta['wall_s']:.0f} s; load {meta['load_1m_at_end']:.1f} at the end)")
    complete = all(e.get("complete", True) for cases in (report["dataset"], report["step"])
                   for sizes in cases.values() for case in sizes.values()
                   for e in case.values())
    return 0 if complete and all(meta["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
