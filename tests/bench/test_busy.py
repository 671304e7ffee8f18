"""The busy-host helper (bench/busy.py): bounded spinners that clean up after themselves."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import busy

ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    """The process has exited (absent, or a zombie waiting for its reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def test_spinner_stops_by_itself_at_its_deadline() -> None:
    procs = busy.start_spinners(1, seconds=0.3)
    try:
        assert procs[0].wait(timeout=20) == 0  # nobody stopped it: the deadline did
    finally:
        busy.stop_spinners(procs)


def test_spinner_stops_when_its_parent_dies() -> None:
    """A crashed benchmark leaves nothing spinning: the orphan sees its parent change."""
    code = ("import sys; from bench.busy import start_spinners; "
            "p = start_spinners(1, 600.0); print(p[0].pid, flush=True); import os; os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=True)
    pid = int(out.stdout.split()[0])
    assert _wait_gone(pid), f"spinner {pid} outlived its parent"


def test_busy_load_spins_one_per_core_and_cleans_up() -> None:
    with busy.busy_load(count=2, seconds=60.0) as n:
        assert n == 2
        kids = [p for p in Path("/proc").iterdir() if p.name.isdigit()
                and _ppid(int(p.name)) == os.getpid() and not _gone(int(p.name))]
        assert len(kids) >= 2
    assert all(_wait_gone(int(p.name)) for p in kids)


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


@pytest.mark.parametrize(("count", "seconds"), [(0, 1.0), (1, 0.0), (1, -1.0)])
def test_bad_spinner_arguments_are_refused(count: int, seconds: float) -> None:
    with pytest.raises(ValueError, match="count|seconds"):
        busy.start_spinners(count, seconds)
