"""The benchmark: impl's pack against verl 0.9.1 and the gather floor, idle and on a busy host.

    python -m bench.run [--out reports/bench.json]      # `nox -s bench`; a few minutes

One case, the one the targets are set for: B = 256 sequences of lengths uniform in [1, 4096],
tp = 1, cp = 4, bucket 512, rank 0's pack, for token ids (`[L]` int64) and `[L, 8]` float32.
impl is fed a list of tensors and the jagged nested tensor that verl takes; verl 0.9.1's
`preprocess_thd_engine` runs as the conformance suite loads it; the floor is one
`index_select` of as many rows from a buffer already holding the batch. Each is timed with
`torch.utils.benchmark.Timer` (a warm-up call, `blocked_autorange`, the given thread count, CUDA
synchronisation on a GPU), first as the host is, then with one spinning process per core added
(`bench.busy`).
Benchmarks, not tests: nothing fails on a slow number. Method and table: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import benchmark

import impl

from .busy import busy_load

MAX_LEN = 4096
PAYLOADS = ("ids", "f32x8")  # [L] int64 token ids; [L, 8] float32
# Without and with one spinning process per core of ours; other load on the host stays.
HOSTS = ("no spinners", "1 spinner per core")


def make_batch(batch: int, payload: str, seed: int, device: str) -> list[torch.Tensor]:
    """Seeded lengths uniform in [1, MAX_LEN]; the same batch for every implementation."""
    lengths = np.random.default_rng(seed + batch).integers(1, MAX_LEN + 1, size=batch)
    gen = torch.Generator().manual_seed(seed)
    if payload == "ids":
        seqs = [torch.randint(0, 150_000, (int(n),), generator=gen) for n in lengths]
    else:
        seqs = [torch.randn(int(n), 8, generator=gen) for n in lengths]
    return [s.to(device) for s in seqs]


def load_verl() -> tuple[Any, Any]:
    """verl 0.9.1's util.py, loaded standalone as the conformance suite loads it, and its fake
    Megatron parallel state."""
    from thd_packing.peers.verl import FakeParallelState, load_util

    with warnings.catch_warnings():  # megatron-core's import-time notices, not ours
        warnings.filterwarnings("ignore", "Transformer Engine and Apex are not installed")
        warnings.simplefilter("ignore", DeprecationWarning)
        return load_util(), FakeParallelState


def calls(seqs: list[torch.Tensor], config: impl.PackConfig,
          verl: tuple[Any, Any] | None) -> tuple[dict[str, Callable[[], Any]], dict[str, bool]]:
    """Rank 0's pack by each contender, and checks that they give the same rows."""
    nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
    flat = torch.cat(seqs)
    rows, _, plan = impl.pack_thd(seqs, config, 0)
    index = torch.arange(plan.local_rows, device=flat.device) % max(flat.shape[0], 1)
    fns: dict[str, Callable[[], Any]] = {
        "impl_list": lambda: impl.pack_thd(seqs, config, 0),
        "impl_nested": lambda: impl.pack_thd(nested, config, 0),
        "floor": lambda: torch.index_select(flat, 0, index),
    }
    checks = {"impl_nested_rows_equal": torch.equal(impl.pack_thd(nested, config, 0)[0], rows)}
    if verl is not None:
        util, fake_state = verl
        state = fake_state(config.tp_size, config.cp_size, 0)

        def verl_pack() -> Any:
            util.mpu = state
            return util.preprocess_thd_engine(nested, pad_to_length_bucket=config.bucket)

        fns["verl"] = verl_pack
        checks["verl_rows_equal"] = torch.equal(verl_pack()[0][0], rows)
    return fns, checks


def measure(fn: Callable[[], Any], threads: int, min_run_time: float) -> dict[str, Any]:
    """Median and interquartile range of `fn`'s time, from `Timer.blocked_autorange`."""
    fn()  # warm-up: first-call allocations and lazy initialisation stay out of the numbers
    m = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads).blocked_autorange(
        min_run_time=min_run_time)
    return {"median_s": m.median, "iqr_s": m.iqr, "runs": len(m.times),
            "calls_per_run": m.number_per_run}


def run_payload(payload: str, args: argparse.Namespace, verl: tuple[Any, Any] | None,
                threads: int) -> dict[str, Any]:
    config = impl.PackConfig(tp_size=1, cp_size=args.cp, bucket=args.bucket)
    seqs = make_batch(args.batch, payload, args.seed, args.device)
    fns, checks = calls(seqs, config, verl)
    out: dict[str, Any] = {"payload": payload, "checks": checks,
                           "local_rows": impl.plan_thd([len(s) for s in seqs], config).local_rows}
    for host in HOSTS:
        if host == HOSTS[1] and args.no_busy:
            continue
        spinners = (os.cpu_count() or 1) if host == HOSTS[1] else 0
        with busy_load(spinners) if spinners else contextlib.nullcontext(0):
            load = os.getloadavg()[0]
            out[host] = {"load_1m_at_start": load}
            for name, fn in fns.items():
                if name == "verl" and spinners:
                    continue  # the table's busy rows compare impl with the floor only
                # verl's loop takes tenths of a second a call: a longer run, several samples
                span = args.min_run_time * (3 if name == "verl" else 1)
                out[host][name] = measure(fn, threads, span)
    return out


def machine(threads: int, device: str) -> dict[str, Any]:
    """Where and with what the numbers were measured."""
    from importlib import metadata

    cpu = platform.processor() or platform.machine()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        cpu = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                    if line.startswith("Model name:")), cpu)
    except OSError:
        pass
    try:
        verl_version: str | None = metadata.version("verl")
    except metadata.PackageNotFoundError:
        verl_version = None
    if device.startswith("cuda"):
        cpu += f"; {torch.cuda.get_device_name(device)}"
    return {"date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"), "cpu": cpu,
            "cores": os.cpu_count(), "threads": threads, "device": device,
            "python": platform.python_version(), "torch": torch.__version__,
            "verl": verl_version, "load_1m_at_start": os.getloadavg()[0]}


def _ms(entry: dict[str, Any] | None) -> str:
    return "-" if not entry else f"{entry['median_s'] * 1e3:.3g}"


def _x(num: dict[str, Any] | None, den: dict[str, Any] | None) -> str:
    if not num or not den or den["median_s"] <= 0:
        return "-"
    return f"{num['median_s'] / den['median_s']:.3g}"


def format_table(report: dict[str, Any]) -> str:
    """The Markdown table of bench/RESULTS.md: median ms (interquartile range in the JSON)."""
    m, c = report["meta"], report["case"]
    lines = [
        f"B = {c['B']}, tp = 1, cp = {c['cp']}, bucket {c['bucket']}, rank 0; median ms "
        f"(torch.utils.benchmark, {m['threads']} threads, {m['device']})",
        "",
        "| data | host (load 1 min) | rows | impl, list | impl, nested | verl 0.9.1 | floor | "
        "verl / impl nested | impl nested / floor | impl list / floor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in report["payloads"]:
        for host in HOSTS:
            t = p.get(host)
            if t is None:
                continue
            lines.append(
                f"| {p['payload']} | {host} ({t['load_1m_at_start']:.1f}) | {p['local_rows']} | "
                f"{_ms(t.get('impl_list'))} | {_ms(t.get('impl_nested'))} | "
                f"{_ms(t.get('verl'))} | {_ms(t.get('floor'))} | "
                f"{_x(t.get('verl'), t.get('impl_nested'))} | "
                f"{_x(t.get('impl_nested'), t.get('floor'))} | "
                f"{_x(t.get('impl_list'), t.get('floor'))} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="reports/bench.json", help="JSON report path")
    p.add_argument("--min-run-time", type=float, default=2.0,
                   help="seconds of timed calls per measurement (verl: 3x); default 2")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="torch intra-op threads while timing (default: torch's own default)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch", type=int, default=256, help=argparse.SUPPRESS)
    p.add_argument("--cp", type=int, default=4, help=argparse.SUPPRESS)
    p.add_argument("--bucket", type=int, default=512, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--no-verl", action="store_true", help="skip verl (e.g. not installed)")
    p.add_argument("--no-busy", action="store_true", help="skip the busy-host rows")
    args = p.parse_args(argv)
    started = time.perf_counter()
    verl = None if args.no_verl else load_verl()
    meta = machine(args.threads, args.device)
    print(f"bench: {meta['date_utc']} UTC, {meta['cpu']} ({meta['cores']} cores), "
          f"{args.threads} threads, {args.device}, torch {meta['torch']}, verl {meta['verl']}, "
          f"load {meta['load_1m_at_start']:.1f}", flush=True)
    payloads = [run_payload(name, args, verl, args.threads) for name in PAYLOADS]
    meta["load_1m_at_end"] = os.getloadavg()[0]
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    report = {"meta": meta, "case": {"B": args.batch, "cp": args.cp, "bucket": args.bucket},
              "payloads": payloads}
    print(format_table(report))
    for entry in payloads:
        print(f"checks, {entry['payload']}: {entry['checks']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out} ({meta['wall_s']:.0f} s; load {meta['load_1m_at_end']:.1f} at the end)")
    bad = [e["payload"] for e in payloads if not all(e["checks"].values())]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
