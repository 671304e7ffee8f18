"""Wall-clock timing helpers: repeated calls with GC off, medians, ratios of medians."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Wall time of ``repeats`` calls after ``warmup`` untimed ones (GC off while timing)."""
    for _ in range(warmup):
        fn()
    gc.collect()
    gc.disable()
    try:
        out = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return out


def time_ranks(make_fn: Callable[[int], Callable[[], Any]], cp: int, repeats: int,
               warmup: int = 1) -> tuple[list[float], list[float]]:
    """Per repeat: rank 0's call time, and the sum over every rank's call (all ranks)."""
    fns = [make_fn(r) for r in range(cp)]
    for _ in range(warmup):
        for fn in fns:
            fn()
    gc.collect()
    gc.disable()
    one, every = [], []
    try:
        for _ in range(repeats):
            total = 0.0
            for rank, fn in enumerate(fns):
                start = time.perf_counter()
                fn()
                elapsed = time.perf_counter() - start
                total += elapsed
                if rank == 0:
                    one.append(elapsed)
            every.append(total)
    finally:
        gc.enable()
    return one, every


def summary(samples: list[float]) -> dict[str, Any]:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "n": len(samples)}


def ratio(num: dict[str, Any] | None, den: dict[str, Any] | None) -> float | None:
    if not num or not den or den["median_s"] <= 0:
        return None
    return float(num["median_s"] / den["median_s"])


def fmt_ms(entry: dict[str, Any] | None) -> str:
    """A `summary`'s median in ms (three significant digits); "-" where nothing was timed."""
    return "-" if not entry else f"{entry['median_s'] * 1e3:.3g}"


def fmt_x(value: float | None) -> str:
    """A ratio (three significant digits); "-" where it could not be taken."""
    return "-" if value is None else f"{value:.3g}"


def fmt_met(value: bool | None, miss: str = "not met") -> str:
    """A goal's verdict: "met", `miss`, or "not measured"."""
    return "not measured" if value is None else ("met" if value else miss)

