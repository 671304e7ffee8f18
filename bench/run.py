"""Benchmarks, side by side: impl, the NumPy reference, upstream verl 0.9.1, the gather floor.

    python -m bench.run [--quick] [--out reports/bench.json]

For each case (B, tp, cp, bucket, payload) it times pack (rank 0 alone, and every rank in turn)
and unpack, and reports medians and ratios. It then measures peak memory per call, counts the
torch ops dispatched per call at B = 16 and B = 1024, and on CUDA (when present) counts kernel
launches and checks for device-to-host syncs. These are benchmarks, never timed tests: nothing
here fails on a slow number; the goals are reported as met or not.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import impl

from .batches import MAX_LEN, PAYLOADS, draw_lengths, make_batch
from .busy_mode import busy_main
from .competitors import Verl, load_reference
from .machine import STEADY_MMAP, STEADY_TRIM, machine, malloc_note
from .probes import (
    count_ops,
    cuda_section,
    memory_section,
    nested_index_cost,
    op_count_section,
    rss_probe,
    rss_probe_child,
)
from .timing import fmt_met, ratio, summary, time_calls, time_ranks
from .timing import fmt_ms as _ms
from .timing import fmt_x as _x

__all__ = ["count_ops", "goals", "malloc_note", "ratio", "main"]

DEFAULT_OUT = "reports/bench.json"
GOAL_VERL_SPEEDUP = 100.0  # impl at least 100x faster than verl at B = 256, cp = 4
GOAL_FLOOR_RATIO = 5.0  # and within 5x of the gather floor


# --------------------------------------------------------------------------- one case


def run_case(batch: int, tp: int, cp: int, bucket: int | None, payload: str,
             seqs: list[torch.Tensor], np_seqs: list[np.ndarray] | None,
             nested: torch.Tensor | None, verl: Verl | None, reference: Any,
             reps: dict[str, int]) -> dict[str, Any]:
    """Every implementation on the same batch: timings, ratios, and bit-exactness checks."""
    config = impl.PackConfig(tp_size=tp, cp_size=cp, bucket=bucket)
    flat = torch.cat(seqs)
    shards = []
    plan = None
    for rank in range(cp):
        rows, _, plan = impl.pack_thd(seqs, config, rank)
        shards.append(rows)
    assert plan is not None
    case: dict[str, Any] = {
        "B": batch, "tp": tp, "cp": cp, "bucket": bucket, "payload": payload,
        "real_tokens": int(flat.shape[0]), "total": plan.total, "local_rows": plan.local_rows,
        "out_bytes_per_rank": shards[0].numel() * shards[0].element_size(),
        "pack": {}, "unpack": {}, "checks": {},
    }
    pack, unpack, checks = case["pack"], case["unpack"], case["checks"]

    # impl, list input (the API's main form) and jagged nested input (what verl takes).
    one, every = time_ranks(lambda r: lambda: impl.pack_thd(seqs, config, r), cp, reps["fast"])
    pack["impl_one"], pack["impl_all"] = summary(one), summary(every)
    if nested is not None:
        one, every = time_ranks(lambda r: lambda: impl.pack_thd(nested, config, r), cp,
                                reps["fast"])
        pack["impl_nested_one"], pack["impl_nested_all"] = summary(one), summary(every)

    # Floor: one index_select of the same number of rows from a flat buffer of the same bytes.
    idx_one = torch.arange(plan.local_rows) % max(flat.shape[0], 1)
    idx_all = torch.arange(plan.total) % max(flat.shape[0], 1)
    pack["floor_one"] = summary(time_calls(lambda: torch.index_select(flat, 0, idx_one),
                                           reps["fast"]))
    pack["floor_all"] = summary(time_calls(lambda: torch.index_select(flat, 0, idx_all),
                                           reps["fast"]))
    # What a list input costs before any gather: one copy of the whole batch into one buffer
    # (the floor reads a buffer that already exists). Reported next to the floor.
    pack["cat_list"] = summary(time_calls(lambda: torch.cat(seqs), reps["fast"]))

    if reference is not None and np_seqs is not None:
        rconfig = reference.PackConfig(tp_size=tp, cp_size=cp, bucket=bucket)
        kept: dict[int, Any] = {}  # the last result of each rank, reused for unpack

        def ref_pack(rank: int) -> Callable[[], Any]:
            def call() -> None:
                kept[rank] = reference.pack_thd(np_seqs, rconfig, rank)
            return call

        one, every = time_ranks(ref_pack, cp, reps["reference"], warmup=0)
        pack["reference_one"], pack["reference_all"] = summary(one), summary(every)
        ref_shards = [kept[r][0] for r in range(cp)]
        ref_plan = kept[0][2]
        checks["reference_rows_equal"] = all(
            torch.equal(mine, torch.from_numpy(theirs))
            for mine, theirs in zip(shards, ref_shards, strict=True))
        unpack["reference"] = summary(time_calls(
            lambda: reference.unpack_thd(ref_shards, ref_plan, rconfig), reps["reference"],
            warmup=0))

    if verl is not None and nested is not None:
        one, every = time_ranks(lambda r: verl.pack_fn(nested, tp, cp, r, bucket), cp,
                                reps["verl"], warmup=reps["verl_warmup"])
        pack["verl_one"], pack["verl_all"] = summary(one), summary(every)
        verl_rows, params, _ = verl.pack_fn(nested, tp, cp, 0, bucket)()
        same_shape = tuple(verl_rows[0].shape) == tuple(shards[0].shape)
        checks["verl_rows_equal"] = bool(same_shape and torch.equal(verl_rows[0], shards[0]))
        unpack["verl"] = summary(time_calls(verl.unpack_fn(nested, shards, params, tp, cp),
                                            reps["verl"], warmup=reps["verl_warmup"]))

    # Unpack: impl, and the floor (one index_select of the real rows from the packed rows).
    unpack["impl"] = summary(time_calls(lambda: impl.unpack_thd(shards, plan, config),
                                        reps["fast"]))
    packed = torch.cat(shards)
    idx_real = torch.arange(flat.shape[0]) % max(packed.shape[0], 1)
    unpack["floor"] = summary(time_calls(lambda: torch.index_select(packed, 0, idx_real),
                                         reps["fast"]))
    back = impl.unpack_thd(shards, plan, config)
    checks["impl_roundtrip"] = all(torch.equal(a, b) for a, b in zip(back, seqs, strict=True))

    case["ratios"] = {
        "verl_over_impl_one": ratio(pack.get("verl_one"), pack["impl_one"]),
        "verl_over_impl_all": ratio(pack.get("verl_all"), pack["impl_all"]),
        "verl_over_impl_nested_one": ratio(pack.get("verl_one"), pack.get("impl_nested_one")),
        "impl_nested_over_floor_one": ratio(pack.get("impl_nested_one"), pack["floor_one"]),
        "impl_over_floor_one": ratio(pack["impl_one"], pack["floor_one"]),
        "impl_over_cat_floor_one": ratio(
            pack["impl_one"],
            {"median_s": pack["cat_list"]["median_s"] + pack["floor_one"]["median_s"]}),
        "impl_over_floor_all": ratio(pack["impl_all"], pack["floor_all"]),
        "reference_over_impl_all": ratio(pack.get("reference_all"), pack["impl_all"]),
        "unpack_verl_over_impl": ratio(unpack.get("verl"), unpack["impl"]),
        "unpack_impl_over_floor": ratio(unpack["impl"], unpack["floor"]),
        "unpack_reference_over_impl": ratio(unpack.get("reference"), unpack["impl"]),
    }
    return case

# --------------------------------------------------------------------------- report


def format_table(cases: list[dict[str, Any]]) -> str:
    head = (f"{'B':>5} {'tp':>2} {'cp':>2} {'bkt':>4} {'data':>5} {'rows/rk':>8} | "
            f"{'impl1':>7} {'implA':>7} {'refA':>7} {'verl1':>7} {'verlA':>7} {'flr1':>7} | "
            f"{'verl/impl':>9} {'impl/flr':>8} | {'unp impl':>8} {'unp ref':>8} "
            f"{'unp verl':>8} {'unp flr':>8}")
    lines = ["pack and unpack, median ms (1 = rank 0 alone, A = every rank in turn)", head,
             "-" * len(head)]
    for c in cases:
        p, u, r = c["pack"], c["unpack"], c["ratios"]
        lines.append(
            f"{c['B']:>5} {c['tp']:>2} {c['cp']:>2} {c['bucket'] or '-':>4} {c['payload']:>5} "
            f"{c['local_rows']:>8} | {_ms(p['impl_one']):>7} {_ms(p['impl_all']):>7} "
            f"{_ms(p.get('reference_all')):>7} {_ms(p.get('verl_one')):>7} "
            f"{_ms(p.get('verl_all')):>7} {_ms(p['floor_one']):>7} | "
            f"{_x(r['verl_over_impl_one']):>9} {_x(r['impl_over_floor_one']):>8} | "
            f"{_ms(u['impl']):>8} {_ms(u.get('reference')):>8} {_ms(u.get('verl')):>8} "
            f"{_ms(u['floor']):>8}")
    return "\n".join(lines)


def goals(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue goals at B = 256, cp = 4: verl/impl >= 100 and impl/floor <= 5 (rank 0 calls).

    Judged on impl's list input (the API's main form) and, separately, on the jagged nested
    input that verl itself takes.
    """
    sel = [c for c in cases if c["B"] == 256 and c["cp"] == 4]
    out: dict[str, Any] = {"cases": len(sel)}
    for form, speed_key, floor_key in (
        ("list of tensors", "verl_over_impl_one", "impl_over_floor_one"),
        ("jagged nested tensor", "verl_over_impl_nested_one", "impl_nested_over_floor_one"),
    ):
        speed = [c["ratios"][speed_key] for c in sel if c["ratios"].get(speed_key) is not None]
        floor = [c["ratios"][floor_key] for c in sel if c["ratios"].get(floor_key) is not None]
        out[form] = {
            "verl_over_impl_min": min(speed) if speed else None,
            "verl_over_impl_median": statistics.median(speed) if speed else None,
            "verl_speedup_met": min(speed) >= GOAL_VERL_SPEEDUP if speed else None,
            "impl_over_floor_max": max(floor) if floor else None,
            "impl_over_floor_median": statistics.median(floor) if floor else None,
            "floor_met": max(floor) <= GOAL_FLOOR_RATIO if floor else None,
        }
    cat_floor = [c["ratios"]["impl_over_cat_floor_one"] for c in sel
                 if c["ratios"].get("impl_over_cat_floor_one") is not None]
    out["list of tensors"]["impl_over_cat_floor_max"] = max(cat_floor) if cat_floor else None
    return out


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="B in {32, 256} only, fewer repeats, no subprocess memory probes")
    p.add_argument("--out", default=DEFAULT_OUT, help="JSON report path")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=None,
                   help="repeats for the fast calls (impl, floor); default 15, quick 7")
    p.add_argument("--batches", type=lambda t: tuple(int(v) for v in t.split(",")),
                   default=None, help="comma-separated B values (default 32,256,1024)")
    p.add_argument("--no-verl", action="store_true", help="skip upstream verl")
    p.add_argument("--no-reference", action="store_true", help="skip the NumPy reference")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default 1: verl's loop and the reference are "
                        "single-threaded, and OpenMP barriers stall on a busy shared machine; "
                        "with --busy, torch's own default)")
    p.add_argument("--busy", action="store_true",
                   help="busy-host mode: the B = 256 cases idle and with one spinning process "
                        "per core, in alternating rounds (default out reports/bench-busy.json)")
    p.add_argument("--rounds", type=int, default=2, help="--busy: idle/busy rounds per case")
    p.add_argument("--malloc", choices=("default", "steady"), default="default",
                   help="glibc allocator settings: 'default', or 'steady' (fixed mmap and trim "
                        "thresholds, so freed buffers are reused instead of returned to the OS "
                        "and faulted in again on the next call, as a caching allocator does)")
    p.add_argument("--_rss-probe", dest="rss_probe", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.malloc == "steady" and os.environ.get("MALLOC_MMAP_THRESHOLD_") != STEADY_MMAP:
        # glibc reads these once, at start-up: run again with them set.
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": STEADY_MMAP,
               "MALLOC_TRIM_THRESHOLD_": STEADY_TRIM}
        cmd = [sys.executable, "-m", "bench.run",
               *(sys.argv[1:] if argv is None else list(argv))]
        return subprocess.run(cmd, env=env, check=False).returncode
    if args.threads is not None or not args.busy:
        torch.set_num_threads(args.threads or 1)
    if args.rss_probe:
        rss_probe_child(args.rss_probe, args.seed)
        return 0

    verl: Verl | None = None
    verl_note = "disabled (--no-verl)"
    if not args.no_verl:
        try:
            verl = Verl()
            verl_note = f"verl {verl.version}"
        except Exception as exc:  # noqa: BLE001 - any failure to load means "not measured"
            verl_note = f"not measured: {exc}"
    if args.busy:
        out = "reports/bench-busy.json" if args.out == DEFAULT_OUT else args.out
        return busy_main(args.seed, args.repeats or 15, args.rounds, out, verl, verl_note)
    reference = None if args.no_reference else load_reference()

    batches = args.batches or ((32, 256) if args.quick else (32, 256, 1024))
    fast = args.repeats or (7 if args.quick else 15)

    def reps(batch: int) -> dict[str, int]:
        # The Python-loop implementations are slow at large B: fewer repeats, said in the output.
        slow = 3 if batch <= 256 else 1
        big = batch > 256
        return {"fast": fast, "verl": 2 if big else 5, "verl_warmup": 0 if big else 1,
                "reference": slow}

    info = machine()
    print(f"allocator: {malloc_note()}")
    print(f"bench: {info['date_utc']} UTC, {info['cpu']} ({info['cores']} cores, "
          f"{info['torch_threads']} torch threads, load {info['load_average_1m_at_start']:.1f}), "
          f"torch {info['torch']}, numpy {info['numpy']}, {verl_note}")
    print(f"repeats: impl/floor {fast}; verl 5 (B<=256) / 2 (B=1024, no warm-up); reference 3 "
          f"(B<=256) / 1 (B=1024); reference never warmed up; medians reported")
    cases = []
    started = time.perf_counter()
    for batch in batches:
        lengths = draw_lengths(batch, args.seed)
        for payload in PAYLOADS:
            seqs = make_batch(lengths, payload, args.seed)
            np_seqs = [s.numpy() for s in seqs] if reference is not None else None
            nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
            for tp in (1, 2):
                for cp in (1, 4):
                    for bucket in (None, 512):
                        case = run_case(batch, tp, cp, bucket, payload, seqs, np_seqs, nested,
                                        verl, reference, reps(batch))
                        cases.append(case)
                        print(f"  B={batch} tp={tp} cp={cp} bucket={bucket} {payload}: "
                              f"impl {_ms(case['pack']['impl_one'])} ms, verl "
                              f"{_ms(case['pack'].get('verl_one'))} ms "
                              f"[{time.perf_counter() - started:.0f} s]", flush=True)
            del seqs, np_seqs, nested
            gc.collect()

    report: dict[str, Any] = {"meta": {**info, "verl_note": verl_note, "quick": args.quick,
                                       "malloc": malloc_note(),
                                       "seed": args.seed, "max_len": MAX_LEN,
                                       "repeats": {
                                           "fast": fast, "verl": "5 / 2 (B=1024, no warm-up)",
                                           "reference": "3 / 1 (B=1024), no warm-up"}},
                              "cases": cases}
    print()
    print(format_table(cases))
    report["goals"] = goals(cases)
    for form, g in ((k, v) for k, v in report["goals"].items() if isinstance(v, dict)):
        print(f"goals at B=256, cp=4, rank 0, impl fed a {form}: verl/impl min "
              f"{_x(g['verl_over_impl_min'])} median {_x(g['verl_over_impl_median'])} "
              f"(goal >= {GOAL_VERL_SPEEDUP:g}: {fmt_met(g['verl_speedup_met'], 'NOT met')});"
              f" impl/floor max {_x(g['impl_over_floor_max'])} median "
              f"{_x(g['impl_over_floor_median'])} (goal <= {GOAL_FLOOR_RATIO:g}: "
              f"{fmt_met(g['floor_met'], 'NOT met')})"
              + (f"; impl/(copy of the batch + floor) max {_x(g['impl_over_cat_floor_max'])}"
                 if "impl_over_cat_floor_max" in g else ""))
    bad = [c for c in cases if not all(v for v in c["checks"].values())]
    print(f"checks (impl round trip; rows equal to reference / verl): "
          f"{len(cases) - len(bad)}/{len(cases)} cases all true")
    for c in bad:
        print(f"  B={c['B']} tp={c['tp']} cp={c['cp']} bucket={c['bucket']} {c['payload']}: "
              f"{c['checks']}")

    report["op_counts"] = op_count_section(args.seed, verl)
    oc = report["op_counts"]
    print(f"\ntorch ops per call (cp=4, bucket 512): impl pack B=16 "
          f"{oc['B=16']['impl_pack']['total']}, B=1024 {oc['B=1024']['impl_pack']['total']} "
          f"(equal: {oc['impl_pack_equal']}); impl unpack {oc['B=16']['impl_unpack']['total']} / "
          f"{oc['B=1024']['impl_unpack']['total']} (equal: {oc['impl_unpack_equal']})"
          + (f"; verl pack {oc['B=16']['verl_pack']['total']} / "
             f"{oc['B=1024']['verl_pack']['total']}" if verl is not None else ""))
    report["nested_index_s"] = nested_index_cost()
    print("one nested[i] on a jagged nested tensor (verl reads each sequence so): " + ", ".join(
        f"{k} {v * 1e6:.0f} us" for k, v in report["nested_index_s"].items()))
    fc = oc["fixed_cost_s"]
    print(f"fixed cost per call (B=16, 8 tokens each, cp=4): impl pack {_ms(fc['impl_pack'])} ms, "
          f"impl unpack {_ms(fc['impl_unpack'])} ms, one index_select {_ms(fc['floor'])} ms")

    report["memory"] = memory_section(args.seed, verl)
    print("\npeak memory per call, B=1024 cp=4 bucket 512 f32x8 (torch profiler, live torch "
          "allocations):")
    for name, m in report["memory"]["torch_profiler"].items():
        print(f"  {name:20s} peak {m['peak_bytes'] / 2**20:8.2f} MiB, output "
              f"{m['output_bytes'] / 2**20:8.2f} MiB, peak/output {m['peak_over_output']:.2f}")
    if not args.quick:
        probes = ["impl", "floor"] + (["verl"] if verl is not None else []) + \
            (["reference"] if reference is not None else [])
        report["memory"]["rss_subprocess"] = {w: rss_probe(w, args.seed) for w in probes}
        print("  resident-set high-water mark added by one rank-0 pack call (subprocess):")
        for name, m in report["memory"]["rss_subprocess"].items():
            if "error" in m:
                print(f"    {name:10s} error: {m['error']}")
            else:
                print(f"    {name:10s} +{m['added_bytes'] / 2**20:8.2f} MiB, output "
                      f"{m['output_bytes'] / 2**20:8.2f} MiB, ratio "
                      f"{m['added_over_output']:.2f}")

    report["cuda"] = cuda_section(args.seed, verl)
    print(f"\nCUDA: {json.dumps(report['cuda']) if 'skipped' in report['cuda'] else ''}")
    if "skipped" not in report["cuda"]:
        for key, entry in report["cuda"].items():
            if key.startswith("B="):
                print(f"  {key}: {entry['kernels_and_copies']} kernels/copies, sync: "
                      f"{entry['sync']}, impl {_ms(entry['impl_one'])} ms, floor "
                      f"{_ms(entry['floor_one'])} ms, verl {_ms(entry.get('verl_one'))} ms")

    report["meta"]["load_average_1m_at_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
