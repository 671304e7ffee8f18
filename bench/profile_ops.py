"""Where one pack's time goes, idle and on a busy host: the torch profiler's top ops.

    python -m bench.profile_ops [--payload ids|f32x8] [--calls 10] [--before /tmp/before/impl]

B = 256 nested input, tp 2, cp 4, bucket 512, rank 0, torch's default thread count; the same
calls profiled with no spinners and with one spinning process per core (`bench.busy`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Sequence

import torch
from torch.profiler import ProfilerActivity, profile

import impl

from .batches import draw_lengths, make_batch
from .busy import busy_load
from .compare import load_copy


def top_ops(module: object, payload: str, calls: int, busy: bool, rows: int) -> str:
    seqs = make_batch(draw_lengths(256, 0), payload, 0)
    nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
    config = module.PackConfig(tp_size=2, cp_size=4, bucket=512)  # type: ignore[attr-defined]
    pack = module.pack_thd  # type: ignore[attr-defined]
    for _ in range(3):
        pack(nested, config, 0)
    with busy_load() if busy else contextlib.nullcontext():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                pack(nested, config, 0)
        load = os.getloadavg()[0]
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
    return f"{'busy' if busy else 'idle'} (load {load:.1f}), {calls} calls:\n{table}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_ops",
                                description=__doc__.splitlines()[0])
    p.add_argument("--payload", choices=("ids", "f32x8"), default="ids")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--rows", type=int, default=8, help="ops listed")
    p.add_argument("--before", default=None, help="also profile this impl copy (bench.compare)")
    args = p.parse_args(argv)
    copies: list[tuple[str, object]] = [("impl (this checkout)", impl)]
    if args.before:
        copies.insert(0, (f"impl at {args.before}", load_copy(args.before)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, payload {args.payload}")
    for name, module in copies:
        for busy in (False, True):
            print(f"--- {name}, " + top_ops(module, args.payload, args.calls, busy, args.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
