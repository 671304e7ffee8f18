"""The busy-host helper (bench/busy.py) and the busy mode's bookkeeping: no timing here."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import busy, busy_mode
from bench import report as report_md

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


def _t(ms: float) -> dict[str, Any]:
    return {"median_s": ms / 1e3, "min_s": ms / 1e3, "n": 3}


def _case(cp: int, idle: dict[str, float], busy_ms: dict[str, float]) -> dict[str, Any]:
    i = {k: _t(v) for k, v in idle.items()}
    b = {k: _t(v) for k, v in busy_ms.items()}
    ratios = {}
    for _, key in busy_mode.FORMS:
        ratios[f"{key}_busy_over_idle"] = busy_ms[key] / idle[key]
        ratios[f"{key}_over_floor_busy"] = busy_ms[key] / busy_ms["floor"]
    return {"B": 256, "tp": 2, "cp": cp, "bucket": 512, "payload": "ids", "local_rows": 100,
            "load_1m": {"idle": 0.5, "busy": 2.5}, "idle": i, "busy": b, "ratios": ratios}


def test_busy_goals_take_the_worst_cp4_case() -> None:
    cases = [
        _case(4, {"impl": 1.0, "impl_nested": 0.5, "floor": 0.1},
              {"impl": 1.5, "impl_nested": 0.6, "floor": 0.2}),  # list 1.5x, nested 1.2x
        _case(4, {"impl": 1.0, "impl_nested": 0.5, "floor": 0.1},
              {"impl": 2.5, "impl_nested": 0.9, "floor": 0.2}),  # list 2.5x: misses
        _case(1, {"impl": 1.0, "impl_nested": 0.5, "floor": 0.1},
              {"impl": 50.0, "impl_nested": 50.0, "floor": 0.1}),  # cp = 1: not judged
    ]
    goals = busy_mode.busy_goals(cases)
    assert goals["cases"] == 2
    listed, nested = goals["list of tensors"], goals["jagged nested tensor"]
    assert listed["busy_over_idle_max"] == pytest.approx(2.5)
    assert listed["busy_over_idle_met"] is False
    assert listed["over_floor_busy_max"] == pytest.approx(12.5)
    assert listed["over_floor_busy_met"] is False
    assert nested["busy_over_idle_max"] == pytest.approx(1.8) and nested["busy_over_idle_met"]
    assert nested["over_floor_busy_max"] == pytest.approx(4.5) and nested["over_floor_busy_met"]


def test_busy_report_formats_idle_and_busy() -> None:
    cases = [_case(4, {"impl": 1.0, "impl_nested": 0.5, "floor": 0.125, "verl": 150.0},
                   {"impl": 1.5, "impl_nested": 0.75, "floor": 0.25, "verl": 300.0})]
    report = {
        "meta": {"date_utc": "2026-01-01 00:00", "cpu": "test CPU", "cores": 2,
                 "torch_threads": 2, "python": "3.11", "torch": "x", "verl": "0.9.1",
                 "verl_note": "verl 0.9.1", "malloc": "default"},
        "busy_setup": {"spinners": 2, "rounds": 2, "repeats": {"fast": 15, "verl": 3}},
        "busy_cases": cases, "busy_goals": busy_mode.busy_goals(cases),
    }
    text = report_md.render_busy(report)
    assert ("| 2 | 4 | 512 | ids | 100 | 0.5 / 2.5 | 1 | 1.5 | 0.5 | 0.75 | 150 | 300 | 0.125 "
            "| 0.25 | 1.5 | 3 | 1.5 | 6 |") in text
    assert "| jagged nested tensor | 1.5 | 1.5 | met | 3 | 3 | met |" in text
    assert "| list of tensors | 1.5 | 1.5 | met | 6 | 6 | not met |" in text
    assert "2 spinning processes" in text
    table = busy_mode.format_busy_table(cases)
    assert "0.75" in table and "300" in table and "B=256" in table


def test_compare_loads_a_second_impl_copy_and_interleaves() -> None:
    """bench.compare imports another impl copy under its own name; calls alternate per round."""
    import torch

    import impl
    from bench import compare

    other = compare.load_copy(str(ROOT / "impl"), name="impl_copy_for_test")
    assert other is not impl and other.__name__ == "impl_copy_for_test"
    seqs = [torch.arange(n) for n in (5, 0, 9)]
    a = other.pack_thd(seqs, other.PackConfig(cp_size=2), 1)
    b = impl.pack_thd(seqs, impl.PackConfig(cp_size=2), 1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    calls: list[str] = []
    times = compare.interleaved([lambda: calls.append("a"), lambda: calls.append("b")], 3)
    assert [len(t) for t in times] == [3, 3]
    assert calls == ["a", "b"] + ["a", "b"] * 3  # one warm-up each, then alternating
