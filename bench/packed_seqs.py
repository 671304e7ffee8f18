"""verl's mask entry point side by side: impl's mask form vs verl's preprocess_packed_seqs vs the
gather floor (issue 13), one run, B = 256, S = 4096, cp = 4, rank 0.

`python -m bench.packed_seqs [--quick] [--out reports/bench-packed-seqs.json]`

Per mask pattern (left-padded prompts, right-padded responses, a scattered mask) and payload
(token ids `[B, S]` int64; hidden states `[B, S, 64]` bf16) it times, interleaved per repeat:
`impl.pack_thd(x, config, 0, mask=mask)` (the mask form), the adapter's
`preprocess_packed_seqs` (the same plus PackedSeqParams), verl 0.9.1's `preprocess_packed_seqs`
(util.py loaded standalone, fake parallel state), the floor (one `index_select` of rank 0's rows
from the padded batch with the index built beforehand), and the mask reduction alone (the
lengths every mask packer must read). Goals: verl / impl >= 100, impl / floor <= 3.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import impl

DEFAULT_OUT = "reports/bench-packed-seqs.json"
GOAL_OVER_VERL = 100.0
GOAL_OVER_FLOOR = 3.0
PATTERNS = ("left", "right", "scattered")
PAYLOADS = {"ids": ((), torch.int64), "hidden64-bf16": ((64,), torch.bfloat16)}


def make_mask(pattern: str, b: int, s: int, rng: np.random.Generator) -> torch.Tensor:
    """Lengths uniform in [S/8, S]; left / right aligned, or scattered over the row."""
    lengths = rng.integers(s // 8, s + 1, size=b)
    cols = np.arange(s)[None, :]
    if pattern == "left":
        mask = cols >= (s - lengths)[:, None]
    elif pattern == "right":
        mask = cols < lengths[:, None]
    else:
        mask = rng.random((b, s)) < (lengths / s)[:, None]
    return torch.from_numpy(np.ascontiguousarray(mask))


def floor_index(mask: torch.Tensor, config: impl.PackConfig) -> torch.Tensor:
    """Rank 0's gather index into the padded batch viewed [B * S, ...] (padding rows read row
    0): what a packer that already knew it would hand to one index_select."""
    from impl.rowmap import row_sources

    lengths = mask.sum(1).tolist()
    plan = impl.plan_thd(lengths, config)
    seq, offset, real = row_sources(plan, config, 0)
    flat = torch.nonzero(mask.reshape(-1)).view(-1)
    starts = plan.cu_seqlens[:-1].to(torch.int64)
    compact = torch.where(real, starts[seq] + offset, 0)
    return torch.where(real, flat[compact], 0)


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, float]]:
    """Medians of `repeats` rounds, each calling every function once in turn (GC off), so
    that load changes on a busy host hit all of them alike; one warm-up round first."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            for key, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - start)
    finally:
        gc.enable()
    return {k: {"median_s": statistics.median(v), "min_s": min(v), "n": len(v)}
            for k, v in times.items()}


def run_case(pattern: str, payload: str, b: int, s: int, cp: int, repeats: int, verl: Any,
             verl_repeats: int, seed: int) -> dict[str, Any]:
    from conformance.targets._megatron_impl import fake_parallel_state
    from impl import megatron as adapter

    rng = np.random.default_rng(seed)
    mask = make_mask(pattern, b, s, rng)
    trail, dtype = PAYLOADS[payload]
    x = torch.randint(1, 50_000, (b, s, *trail)).to(dtype)
    config = impl.PackConfig(cp_size=cp)
    idx = floor_index(mask, config)
    flat = x.view(b * s, *trail)
    with fake_parallel_state(1, cp, 0):
        want, _ = adapter.preprocess_packed_seqs(x, mask)
        fns: dict[str, Callable[[], Any]] = {
            "impl": lambda: impl.pack_thd(x, config, 0, mask=mask),
            "adapter": lambda: adapter.preprocess_packed_seqs(x, mask),
            "floor": lambda: flat.index_select(0, idx),
            "mask_lengths": lambda: mask.view(torch.uint8).sum(1, dtype=torch.int64),
        }
        times = interleaved(fns, repeats)
    if not torch.equal(want[0], impl.pack_thd(x, config, 0, mask=mask)[0]):
        raise AssertionError("impl's mask form and the adapter disagree")
    if verl is not None:
        from conformance.targets.verl import FakeParallelState

        verl.mpu = FakeParallelState(1, cp, 0)
        got, _ = verl.preprocess_packed_seqs(x, mask)
        if not torch.equal(got, want):
            raise AssertionError(f"verl and the adapter disagree ({pattern}, {payload})")
        times.update(interleaved({"verl": lambda: verl.preprocess_packed_seqs(x, mask)},
                                 verl_repeats))
    ratios = {
        "verl_over_impl": _ratio(times.get("verl"), times["impl"]),
        "verl_over_adapter": _ratio(times.get("verl"), times["adapter"]),
        "impl_over_floor": _ratio(times["impl"], times["floor"]),
        "adapter_over_floor": _ratio(times["adapter"], times["floor"]),
        "mask_lengths_over_floor": _ratio(times["mask_lengths"], times["floor"]),
        "verl_over_impl_min": _ratio(times.get("verl"), times["impl"], "min_s"),
        "impl_over_floor_min": _ratio(times["impl"], times["floor"], "min_s"),
    }
    return {"pattern": pattern, "payload": payload, "B": b, "S": s, "cp": cp, "rank": 0,
            "tokens": int(mask.sum()), "rows_rank0": int(want.shape[1]), "times": times,
            "ratios": ratios}


def _ratio(num: dict[str, float] | None, den: dict[str, float],
           key: str = "median_s") -> float | None:
    return None if num is None else num[key] / den[key]


def _ms(entry: dict[str, float] | None) -> str:
    """Median (min) in ms: on a busy host the min is the call that was not descheduled."""
    if entry is None:
        return "-"
    return f"{entry['median_s'] * 1e3:.2f} ({entry['min_s'] * 1e3:.2f})"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def table(cases: list[dict[str, Any]]) -> str:
    lines = ["times: median (min) of the interleaved repeats, rank 0", "",
             "| mask | payload | tokens | rows/rank | impl ms | adapter ms | verl ms | floor ms "
             "| mask sum ms | verl/impl | impl/floor | verl/impl (min) | impl/floor (min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        t, r = c["times"], c["ratios"]
        lines.append(f"| {c['pattern']} | {c['payload']} | {c['tokens']} | {c['rows_rank0']} | "
                     f"{_ms(t['impl'])} | {_ms(t['adapter'])} | {_ms(t.get('verl'))} | "
                     f"{_ms(t['floor'])} | {_ms(t['mask_lengths'])} | "
                     f"{_x(r['verl_over_impl'])} | {_x(r['impl_over_floor'])} | "
                     f"{_x(r['verl_over_impl_min'])} | {_x(r['impl_over_floor_min'])} |")
    return "\n".join(lines)


def goals(cases: list[dict[str, Any]]) -> dict[str, Any]:
    over_verl = [c["ratios"]["verl_over_impl"] for c in cases
                 if c["ratios"]["verl_over_impl"] is not None]
    over_floor = [c["ratios"]["impl_over_floor"] for c in cases]
    return {
        "verl_over_impl_min": min(over_verl) if over_verl else None,
        "verl_over_impl_met": min(over_verl) >= GOAL_OVER_VERL if over_verl else None,
        "impl_over_floor_max": max(over_floor),
        "impl_over_floor_met": max(over_floor) <= GOAL_OVER_FLOOR,
        "impl_over_floor_met_per_payload": {
            p: max(c["ratios"]["impl_over_floor"] for c in cases if c["payload"] == p)
            <= GOAL_OVER_FLOOR for p in sorted({c["payload"] for c in cases})},
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.packed_seqs",
                                description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="ids only, fewer repeats")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--repeats", type=int, default=None, help="impl/floor repeats (default 15)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, "
                   "as bench.run: verl's loop is single-threaded)")
    p.add_argument("--no-verl", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--cp", type=int, default=4)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from bench.machine import machine

    verl = None
    verl_note = "disabled (--no-verl)"
    if not args.no_verl:
        try:
            from conformance.targets.verl import load_util

            verl = load_util()
            verl_note = "verl/models/mcore/util.py loaded standalone"
        except Exception as exc:  # noqa: BLE001 - any failure to load means "not measured"
            verl_note = f"not measured: {exc}"
    repeats = args.repeats or (7 if args.quick else 15)
    payloads = ("ids",) if args.quick else tuple(PAYLOADS)
    cases = []
    for k, (payload, pattern) in enumerate((pl, pt) for pl in payloads for pt in PATTERNS):
        case = run_case(pattern, payload, args.batch, args.seq, args.cp, repeats, verl,
                        3 if args.quick else 5, args.seed + k)
        cases.append(case)
        print(f"{pattern:9} {payload:14} impl {_ms(case['times']['impl'])} ms, floor "
              f"{_ms(case['times']['floor'])} ms, verl {_ms(case['times'].get('verl'))} ms",
              flush=True)
    report = {"machine": machine(), "verl": verl_note, "repeats": repeats, "cases": cases,
              "goals": goals(cases)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(table(cases))
    print(json.dumps(report["goals"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
