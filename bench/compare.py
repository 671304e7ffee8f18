"""Two copies of impl timed interleaved on the same batches: did a change make pack slower?

    git -C . archive <commit> impl | tar -x -C /tmp/before
    python -m bench.compare /tmp/before/impl [--threads 1] [--busy] [--out reports/compare.json]

Each repeat calls the other copy, this checkout's impl and the floor once each, in turn, so
drifting load on a shared host hits all three alike. Cases: B = 256 (`--batch`), cp = 4
(`--cp`), rank 0, tp 1/2, bucket none/512, ids and [L, 8] float32, nested and list input. A
benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

import impl

from .batches import PAYLOADS, draw_lengths, make_batch
from .busy import busy_load


def load_copy(path: str, name: str = "impl_before") -> ModuleType:
    """Import the impl package at `path` under another name (it uses relative imports only)."""
    init = Path(path) / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[path])
    if spec is None or spec.loader is None:
        raise ValueError(f"no impl package at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def interleaved(fns: Sequence[Callable[[], Any]], repeats: int) -> list[list[float]]:
    """Wall times of `repeats` rounds, each calling every function once, in turn."""
    for fn in fns:
        fn()
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, acc in zip(fns, out, strict=True):
            start = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - start)
    return out


def compare(before: ModuleType, repeats: int, seed: int,
            cps: Sequence[int] = (4,), batch_size: int = 256) -> list[dict[str, Any]]:
    lengths = draw_lengths(batch_size, seed)
    rows = []
    for payload in PAYLOADS:
        seqs = make_batch(lengths, payload, seed)
        nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
        flat = torch.cat(seqs)
        for tp, cp, bucket in itertools.product((1, 2), cps, (None, 512)):
            new_cfg = impl.PackConfig(tp_size=tp, cp_size=cp, bucket=bucket)
            old_cfg = before.PackConfig(tp_size=tp, cp_size=cp, bucket=bucket)
            local = impl.plan_thd(lengths, new_cfg).local_rows
            idx = torch.arange(local) % flat.shape[0]
            for form, batch in (("nested", nested), ("list", seqs)):
                a, b = before.pack_thd(batch, old_cfg, 0), impl.pack_thd(batch, new_cfg, 0)
                same = torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
                times = interleaved([partial(before.pack_thd, batch, old_cfg, 0),
                                     partial(impl.pack_thd, batch, new_cfg, 0),
                                     partial(torch.index_select, flat, 0, idx)], repeats)
                med = [statistics.median(t) for t in times]
                rows.append({"batch": batch_size, "tp": tp, "cp": cp, "bucket": bucket,
                             "payload": payload, "form": form,
                             "before_ms": med[0] * 1e3, "after_ms": med[1] * 1e3,
                             "floor_ms": med[2] * 1e3, "after_over_before": med[1] / med[0],
                             "before_min_ms": min(times[0]) * 1e3,
                             "after_min_ms": min(times[1]) * 1e3, "equal": same,
                             "load_1m": os.getloadavg()[0]})
                print(f"  B={batch_size} tp={tp} cp={cp} bucket={bucket} {payload} {form}: before "
                      f"{med[0] * 1e3:.3f} after {med[1] * 1e3:.3f} floor {med[2] * 1e3:.3f} ms "
                      f"(equal {same})",
                      flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    p.add_argument("before", help="path of the other impl package (a copy of impl/)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--busy", action="store_true", help="with one spinning process per core")
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cp", type=lambda t: tuple(int(v) for v in t.split(",")), default=(4,),
                   help="comma-separated cp sizes (default 4)")
    p.add_argument("--batch", type=int, default=256, help="sequences per batch (default 256)")
    p.add_argument("--out", default=None, help="JSON path for the rows")
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    before = load_copy(args.before)
    print(f"compare: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{'busy' if args.busy else 'no spinners'}, load {os.getloadavg()[0]:.1f}")
    with busy_load() if args.busy else contextlib.nullcontext():
        rows = compare(before, args.repeats, args.seed, args.cp, args.batch)
    ratios = [r["after_over_before"] for r in rows]
    print(f"after/before: median {statistics.median(ratios):.3g}, max {max(ratios):.3g}; "
          f"all equal: {all(r['equal'] for r in rows)}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"threads": torch.get_num_threads(),
                                              "busy": args.busy, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
