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


def _report(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """A busy-mode report as `bench.run --busy` writes it, around made-up cases."""
    return {
        "meta": {"date_utc": "2026-01-01 00:00", "cpu": "test CPU", "cores": 2,
                 "torch_threads": 2, "python": "3.11", "torch": "x", "verl": "0.9.1",
                 "verl_note": "verl 0.9.1", "malloc": "default"},
        "busy_setup": {"spinners": 2, "rounds": 2, "repeats": {"fast": 15, "verl": 3}},
        "busy_cases": cases, "busy_goals": busy_mode.busy_goals(cases),
        "busy_bound": busy_mode.busy_bound(cases),
    }


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
    report = _report(cases)
    text = report_md.render_busy(report)
    assert ("| 2 | 4 | 512 | ids | 100 | 0.5 / 2.5 | 1 | 1.5 | 0.5 | 0.75 | 150 | 300 | 0.125 "
            "| 0.25 | 1.5 | 3 | 1.5 | 6 |") in text
    assert "| jagged nested tensor | 1.5 | 1.5 | met | 3 | 3 | met |" in text
    assert "| list of tensors | 1.5 | 1.5 | met | 6 | 6 | not met |" in text
    assert "2 spinning processes" in text
    table = busy_mode.format_busy_table(cases)
    assert "0.75" in table and "300" in table and "B=256" in table


def _bound_case(cp: int, fixed: float, rowmap: float) -> dict[str, Any]:
    """A case with the design's bound timed (busy, ms): impl nested 1.0, floor 0.1."""
    case = _case(cp, {"impl": 2.0, "impl_nested": 1.0, "floor": 0.1},
                 {"impl": 2.0, "impl_nested": 1.0, "floor": 0.1})
    for mode in ("idle", "busy"):
        case[mode]["fixed"], case[mode]["rowmap"] = _t(fixed), _t(rowmap)
        bound = (fixed + rowmap) / 1e3
        case["ratios"][f"fixed_over_floor_{mode}"] = fixed / 0.1
        case["ratios"][f"rowmap_over_floor_{mode}"] = rowmap / 0.1
        case["ratios"][f"bound_over_floor_{mode}"] = bound / 0.1e-3
        case["ratios"][f"impl_nested_over_bound_{mode}"] = 1e-3 / bound
    case["checks"] = {"ops_impl_nested": 112, "ops_fixed": 108}
    case["row_dims"] = 1
    return case


@pytest.mark.parametrize(("fixed", "ruled_out"), [(0.45, True), (0.3, False)])
def test_bound_rules_the_floor_goal_out_only_above_5x(fixed: float, ruled_out: bool) -> None:
    """(fixed + row-map gather) / floor: 0.45 + 0.08 ms over 0.1 ms is 5.3x, above the goal;
    0.3 + 0.08 ms is 3.8x, which does not rule it out (cp = 1 cases are not judged)."""
    cases = [_bound_case(4, fixed, 0.08), _bound_case(4, 0.2, 0.08), _bound_case(1, 9.0, 0.08)]
    stalled = _bound_case(4, 0.2, 9.0)  # rows with trailing dims, a stalled 2-D gather:
    stalled["payload"], stalled["row_dims"] = "f32x8", 2  # not counted for ids, no verdict
    both = busy_mode.busy_bound([*cases, stalled])
    assert set(both) == {"ids", "f32x8"}
    assert both["f32x8"]["bound_over_floor_busy_max"] == pytest.approx(92.0)
    assert both["f32x8"]["floor_goal_ruled_out"] is None
    bound = both["ids"]
    assert bound["cases"] == 2
    assert bound["bound_over_floor_busy_max"] == pytest.approx((fixed + 0.08) / 0.1)
    assert bound["bound_over_floor_busy_min"] == pytest.approx(min(fixed, 0.2) / 0.1 + 0.8)
    assert bound["floor_goal_ruled_out"] is ruled_out


def test_busy_report_shows_the_bound_when_timed() -> None:
    cases = [_bound_case(4, 0.45, 0.08)]
    report = _report(cases)
    text = report_md.render_busy(report)
    assert ("| 2 | 4 | 512 | ids | 1 | 0.45 | 0.08 | 0.1 | 4.5 | 0.8 | 5.3 | 1.89 | 112 / 108 |"
            in text)
    assert ("ids, B = 256, cp = 4: (fixed + row-map) / floor, busy, 5.3-5.3: the 5x goal is out "
            "of reach for this design in at least one case") in text
    two_d = _bound_case(4, 0.45, 0.08)
    two_d["payload"], two_d["row_dims"] = "f32x8", 2
    report["busy_bound"] = busy_mode.busy_bound([*cases, two_d])
    assert "f32x8, B = 256, cp = 4: (fixed + row-map) / floor, busy, 5.3-5.3: no verdict" in \
        report_md.render_busy(report)
    cases[0]["busy"].pop("fixed")  # a report from before the bound was timed: no section
    assert "What any pack of this design pays" not in report_md.render_busy(report)


def test_rowmap_index_gathers_each_real_row_from_its_source() -> None:
    """The bound's gather index is the row map's (R-ROW-1), checked against hand-made rows:
    lengths 3 and 5, cp = 2 zigzag, tp 1 (each sequence padded to 4 and 8, chunks of 1 and
    2 rows), rank 0 holds chunks 0 and 3 of each sequence."""
    import impl

    config = impl.PackConfig(cp_size=2)
    plan = impl.plan_thd([3, 5], config)
    idx, real = busy_mode.rowmap_index(plan, config, 0)
    # seq 0 rows 0..2 at flat 0..2: chunk 0 = offset 0, chunk 3 = offset 3 (padding -> 0);
    # seq 1 rows 0..4 at flat 3..7: chunk 0 = offsets 0-1, chunk 3 = offsets 6-7 (padding).
    assert idx.tolist() == [0, 0, 3, 4, 0, 0]
    assert real.tolist() == [True, False, True, True, False, False]


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


def test_busy_main_prints_and_writes_a_report_that_renders(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI glue end to end on made-up cases (no timing): every goal and the bound reach
    the terminal and the JSON, and `bench.report` renders that JSON."""
    import json

    cases = [_bound_case(4, 0.45, 0.08)]

    def fake_run_busy(seed: int, verl: Any, fast: int, rounds: int,
                      seconds: float) -> dict[str, Any]:
        return {"busy_cases": cases, "busy_goals": busy_mode.busy_goals(cases),
                "busy_bound": busy_mode.busy_bound(cases),
                "busy_setup": {"spinners": 2, "rounds": rounds,
                               "repeats": {"fast": fast, "verl": 3}}}

    monkeypatch.setattr(busy_mode, "run_busy", fake_run_busy)
    out = tmp_path / "busy.json"
    assert busy_mode.busy_main(0, 15, 2, str(out), None, "disabled (--no-verl)") == 0
    printed = capsys.readouterr().out
    assert "impl fed a jagged nested tensor" in printed and "impl fed a list of tensors" in printed
    assert "ids: (fixed + row-map gather) / floor, busy: 5.3-5.3; 5x floor goal ruled out for " \
        "this design: True" in printed
    report = json.loads(out.read_text())
    assert report["busy_bound"]["ids"]["floor_goal_ruled_out"] is True
    assert "out of reach for this design" in report_md.render_busy(report)
