"""Facts about the run a benchmark number came from: machine, versions, commits, allocator.

Every report carries them (`meta`), because a CPU timing means nothing without the machine,
the load, the torch build and the glibc allocator settings it ran under.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import torch


def machine() -> dict[str, Any]:
    """The machine, versions, commits and load a report's numbers come from (its `meta`)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    from importlib import metadata

    try:
        verl_version: str | None = metadata.version("verl")
    except metadata.PackageNotFoundError:
        verl_version = None
    root = Path(__file__).resolve().parent.parent
    commits = {}
    for key, args in (("head", ["HEAD"]), ("impl", ["HEAD", "--", "impl"])):
        try:
            commits[key] = subprocess.run(
                ["git", "log", "-1", "--format=%h", *args], capture_output=True, text=True,
                cwd=root).stdout.strip() or None
        except OSError:
            commits[key] = None
    dirty: list[str] | None = None
    try:
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "impl", "bench"],
                               capture_output=True, text=True, cwd=root).stdout.splitlines()
    except OSError:
        pass
    return {"commit": commits["head"], "impl_commit": commits["impl"],
            "impl_or_bench_uncommitted_changes": dirty,
            "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"), "cpu": cpu,
            "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__,
            "numpy": np.__version__, "verl": verl_version,
            "load_average_1m_at_start": os.getloadavg()[0]}


STEADY_MMAP = str(2**32)  # bytes; above every buffer here, so nothing is mmapped per call
STEADY_TRIM = str(2**36)  # never give the heap's top back to the OS


def malloc_note() -> str:
    """Which glibc allocator settings this process runs under (they change CPU timings)."""
    mmap, trim = os.environ.get("MALLOC_MMAP_THRESHOLD_"), os.environ.get("MALLOC_TRIM_THRESHOLD_")
    if mmap is None and trim is None:
        return "default (glibc's dynamic mmap/trim thresholds)"
    return f"steady (MALLOC_MMAP_THRESHOLD_={mmap}, MALLOC_TRIM_THRESHOLD_={trim})"
