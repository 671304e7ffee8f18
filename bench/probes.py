"""What one call costs besides time: torch ops dispatched, peak memory, CUDA launches and syncs.

Each section measures impl against the floor (and verl where loaded) on fixed cases.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

import impl

from .batches import draw_lengths, make_batch
from .competitors import Verl
from .timing import summary, time_calls


def count_ops(fn: Callable[[], Any]) -> dict[str, int]:
    """The aten ops one call dispatches (a TorchDispatchMode sees every op, CPU or CUDA)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: dict[str, int] = {}

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            name = str(func.overloadpacket)
            counts[name] = counts.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    with Counter():
        fn()
    return counts


def op_count_section(seed: int, verl: Verl | None) -> dict[str, Any]:
    """Ops per call at B = 16 and B = 1024 (cp = 4, bucket 512, [L, 8] float32)."""
    out: dict[str, Any] = {}
    config = impl.PackConfig(cp_size=4, bucket=512)
    for batch in (16, 1024):
        seqs = make_batch(draw_lengths(batch, seed), "f32x8", seed)
        shards = [impl.pack_thd(seqs, config, r)[0] for r in range(4)]
        plan = impl.plan_thd([s.shape[0] for s in seqs], config)
        entry = {
            "impl_pack": count_ops(partial(impl.pack_thd, seqs, config, 0)),
            "impl_unpack": count_ops(partial(impl.unpack_thd, shards, plan, config)),
        }
        if verl is not None:
            nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
            entry["verl_pack"] = count_ops(verl.pack_fn(nested, 1, 4, 0, 512))
        out[f"B={batch}"] = {k: {"total": sum(v.values()), "ops": v} for k, v in entry.items()}
    for key in ("impl_pack", "impl_unpack"):
        out[f"{key}_equal"] = out["B=16"][key]["total"] == out["B=1024"][key]["total"]
    # The fixed cost of one call: B = 16 sequences of 8 tokens, where data movement is nil.
    tiny = [torch.arange(8, dtype=torch.int64) for _ in range(16)]
    tiny_shards = [impl.pack_thd(tiny, config, r)[0] for r in range(4)]
    tiny_plan = impl.plan_thd([8] * 16, config)
    tiny_flat = torch.cat(tiny)
    tiny_idx = torch.arange(tiny_plan.local_rows)
    out["fixed_cost_s"] = {
        "impl_pack": summary(time_calls(partial(impl.pack_thd, tiny, config, 0), 200)),
        "impl_unpack": summary(time_calls(partial(impl.unpack_thd, tiny_shards, tiny_plan,
                                                  config), 200)),
        "floor": summary(time_calls(partial(torch.index_select, tiny_flat, 0, tiny_idx), 200)),
    }
    return out


def nested_index_cost() -> dict[str, Any]:
    """Why verl's pack grows faster than B: one ``nested[i]`` on a jagged nested tensor (how
    verl reads each sequence) costs time that grows with B. 100-token sequences, per-index us."""
    out: dict[str, Any] = {}
    for batch in (32, 256, 1024):
        nested = torch.nested.nested_tensor(
            [torch.zeros(100, dtype=torch.int64) for _ in range(batch)], layout=torch.jagged)
        nested[0]
        start = time.perf_counter()
        for i in range(batch):
            nested[i]
        out[f"B={batch}"] = (time.perf_counter() - start) / batch
    return out


# --------------------------------------------------------------------------- memory


def torch_peak_bytes(fn: Callable[[], Any]) -> tuple[int, int]:
    """Peak of live torch CPU allocations during one call, and the bytes still live at its end.

    From the profiler's memory events (allocations +, frees -), summed in time order.
    """
    from torch.profiler import ProfilerActivity, profile

    fn()  # warm-up: lazy initialisation is not the call's cost
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = [(e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort()
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    del result
    return peak, live


def memory_section(seed: int, verl: Verl | None) -> dict[str, Any]:
    """Peak memory per call against the output size, B = 1024, cp = 4, bucket 512, f32x8."""
    batch, cp, bucket = 1024, 4, 512
    seqs = make_batch(draw_lengths(batch, seed), "f32x8", seed)
    config = impl.PackConfig(cp_size=cp, bucket=bucket)
    shards = [impl.pack_thd(seqs, config, r)[0] for r in range(cp)]
    plan = impl.plan_thd([s.shape[0] for s in seqs], config)
    out_rank = shards[0].numel() * shards[0].element_size()
    out_unpack = sum(s.numel() * s.element_size() for s in seqs)
    flat = torch.cat(seqs)
    idx = torch.arange(plan.local_rows)
    calls: dict[str, tuple[Callable[[], Any], int]] = {
        "impl_pack_one_rank": (lambda: impl.pack_thd(seqs, config, 0), out_rank),
        "impl_unpack": (lambda: impl.unpack_thd(shards, plan, config), out_unpack),
        "floor_index_select": (lambda: torch.index_select(flat, 0, idx), out_rank),
    }
    if verl is not None:
        nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
        calls["verl_pack_one_rank"] = (verl.pack_fn(nested, 1, cp, 0, bucket), out_rank)
    result: dict[str, Any] = {"case": {"B": batch, "cp": cp, "bucket": bucket,
                                       "payload": "f32x8"}, "torch_profiler": {}}
    for name, (fn, out_bytes) in calls.items():
        peak, live = torch_peak_bytes(fn)
        result["torch_profiler"][name] = {"peak_bytes": peak, "live_at_end_bytes": live,
                                          "output_bytes": out_bytes,
                                          "peak_over_output": peak / out_bytes}
    return result


def rss_probe(which: str, seed: int) -> dict[str, Any]:
    """In a fresh subprocess: the resident-set high-water mark one call adds (VmHWM - VmRSS)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    cmd = [sys.executable, "-m", "bench.run", "--_rss-probe", which, "--seed", str(seed),
           "--threads", str(torch.get_num_threads())]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600,
                          cwd=Path(__file__).resolve().parent.parent)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def rss_probe_child(which: str, seed: int) -> None:
    batch, cp, bucket = 1024, 4, 512
    seqs = make_batch(draw_lengths(batch, seed), "f32x8", seed)
    config = impl.PackConfig(cp_size=cp, bucket=bucket)
    if which == "impl":
        def fn() -> Any:
            return impl.pack_thd(seqs, config, 0)
    elif which == "reference":
        import reference

        np_seqs = [s.numpy() for s in seqs]
        rconfig = reference.PackConfig(cp_size=cp, bucket=bucket)

        def fn() -> Any:
            return reference.pack_thd(np_seqs, rconfig, 0)
    elif which == "verl":
        nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
        fn = Verl().pack_fn(nested, 1, cp, 0, bucket)
    else:
        flat = torch.cat(seqs)
        idx = torch.arange(impl.plan_thd([s.shape[0] for s in seqs], config).local_rows)

        def fn() -> Any:
            return torch.index_select(flat, 0, idx)
    out_bytes = 0
    result = fn()  # warm-up
    del result
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS")
    result = fn()
    peak = _status_kib("VmHWM")
    first = result[0] if isinstance(result, tuple) else result
    out_bytes = int(first.nbytes)
    print(json.dumps({"rss_before_kib": before, "hwm_kib": peak,
                      "added_bytes": (peak - before) * 1024, "output_bytes": out_bytes,
                      "added_over_output": (peak - before) * 1024 / out_bytes}))


# --------------------------------------------------------------------------- CUDA


def cuda_section(seed: int, verl: Verl | None) -> dict[str, Any]:
    """Kernel launches per call and a device-to-host sync check, with host lengths."""
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    from torch.profiler import ProfilerActivity, profile

    out: dict[str, Any] = {"device": torch.cuda.get_device_name()}
    config = impl.PackConfig(cp_size=4, bucket=512)
    for batch in (16, 1024):
        seqs = [s.cuda() for s in make_batch(draw_lengths(batch, seed), "f32x8", seed)]
        impl.pack_thd(seqs, config, 0)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            impl.pack_thd(seqs, config, 0)
            torch.cuda.synchronize()
        kernels = [e for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA]
        sync = "none"
        torch.cuda.set_sync_debug_mode("error")
        try:
            impl.pack_thd(seqs, config, 0)
        except RuntimeError as exc:
            sync = f"synchronizing call: {exc}"
        finally:
            torch.cuda.set_sync_debug_mode("default")
        flat = torch.cat(seqs)
        idx = torch.arange(impl.plan_thd([s.shape[0] for s in seqs], config).local_rows,
                           device="cuda")

        def cuda_timed(fn: Callable[[], Any], repeats: int = 20) -> dict[str, Any]:
            def synced() -> None:
                fn()
                torch.cuda.synchronize()
            return summary(time_calls(synced, repeats, warmup=1))

        entry = {"kernels_and_copies": len(kernels), "sync": sync,
                 "impl_one": cuda_timed(partial(impl.pack_thd, seqs, config, 0)),
                 "floor_one": cuda_timed(partial(torch.index_select, flat, 0, idx))}
        if verl is not None:
            nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
            entry["verl_one"] = cuda_timed(verl.pack_fn(nested, 1, 4, 0, 512), repeats=3)
        out[f"B={batch}"] = entry
    return out
