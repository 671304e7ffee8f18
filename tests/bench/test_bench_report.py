"""The benchmark's bookkeeping (goals, ratios, tables) on hand-made timings: no timing here."""

from __future__ import annotations

from typing import Any

import torch

from bench import machine, run
from bench import report as report_md


def _timing(ms: float) -> dict[str, Any]:
    return {"median_s": ms / 1e3, "min_s": ms / 1e3, "n": 3}


def _case(payload: str, impl_ms: float, verl_ms: float, floor_ms: float) -> dict[str, Any]:
    pack = {"impl_one": _timing(impl_ms), "impl_all": _timing(4 * impl_ms),
            "impl_nested_one": _timing(impl_ms / 2), "verl_one": _timing(verl_ms),
            "verl_all": _timing(4 * verl_ms), "floor_one": _timing(floor_ms),
            "floor_all": _timing(4 * floor_ms)}
    unpack = {"impl": _timing(1.0), "verl": _timing(2.0), "floor": _timing(0.5)}
    ratios = {
        "verl_over_impl_one": run.ratio(pack["verl_one"], pack["impl_one"]),
        "verl_over_impl_all": run.ratio(pack["verl_all"], pack["impl_all"]),
        "verl_over_impl_nested_one": run.ratio(pack["verl_one"], pack["impl_nested_one"]),
        "impl_nested_over_floor_one": run.ratio(pack["impl_nested_one"], pack["floor_one"]),
        "impl_over_floor_one": run.ratio(pack["impl_one"], pack["floor_one"]),
        "impl_over_floor_all": run.ratio(pack["impl_all"], pack["floor_all"]),
        "reference_over_impl_all": None,
        "unpack_verl_over_impl": run.ratio(unpack["verl"], unpack["impl"]),
        "unpack_impl_over_floor": run.ratio(unpack["impl"], unpack["floor"]),
        "unpack_reference_over_impl": None,
    }
    return {"B": 256, "tp": 1, "cp": 4, "bucket": 512, "payload": payload, "local_rows": 100,
            "pack": pack, "unpack": unpack, "ratios": ratios, "checks": {"impl_roundtrip": True}}


def test_goals_follow_the_issue_thresholds() -> None:
    """verl/impl >= 100 and impl/floor <= 5 over every B = 256, cp = 4 case (the worst one)."""
    cases = [_case("ids", 1.0, 150.0, 0.25), _case("f32x8", 2.0, 150.0, 0.5)]
    goals = run.goals(cases)
    listed = goals["list of tensors"]
    assert listed["verl_over_impl_min"] == 75.0 and listed["verl_speedup_met"] is False
    assert listed["impl_over_floor_max"] == 4.0 and listed["floor_met"] is True
    nested = goals["jagged nested tensor"]
    assert nested["verl_over_impl_min"] == 150.0 and nested["verl_speedup_met"] is True
    other = [dict(c, B=32) for c in cases]
    assert run.goals(other)["list of tensors"]["verl_speedup_met"] is None  # not measured


def test_ratio_handles_missing_timings() -> None:
    assert run.ratio(None, _timing(1.0)) is None
    assert run.ratio(_timing(3.0), _timing(1.5)) == 2.0


def test_markdown_tables_carry_the_numbers() -> None:
    cases = [_case("ids", 1.0, 150.0, 0.25)]
    report = {
        "meta": {"date_utc": "2026-01-01 00:00", "cpu": "test CPU", "cores": 2,
                 "torch_threads": 1, "python": "3.11", "torch": "x", "numpy": "y",
                 "verl": "0.9.1", "verl_note": "verl 0.9.1",
                 "repeats": {"fast": 15, "verl": "5", "reference": "3"}},
        "cases": cases, "goals": run.goals(cases),
        "op_counts": {"B=16": {"impl_pack": {"total": 7}}, "B=1024": {"impl_pack": {"total": 7}}},
        "memory": {"torch_profiler": {"impl_pack_one_rank": {
            "peak_bytes": 2 << 20, "output_bytes": 1 << 20, "peak_over_output": 2.0}}},
        "cuda": {"skipped": "no CUDA device"},
    }
    text = report_md.render(report)
    assert "| 256 | 1 | 4 | 512 | ids | 100 | 1 | 4 | 0.5 |" in text
    assert "| impl_pack | 7 | 7 |" in text
    assert "| list of tensors | 150 | 150 | met | 4 | 4 | met |" in text
    assert "no CUDA device" in text


def test_op_counter_counts_dispatched_ops() -> None:
    """The dispatch-mode counter sees each aten op once per call."""
    x = torch.ones(4)
    counts = run.count_ops(lambda: (x + 1).sum())
    assert counts.get("aten.add") == 1 and counts.get("aten.sum") == 1


def test_list_goal_reports_the_batch_copy_floor() -> None:
    """impl / (copy of the batch + floor) is the worst case's ratio, computed from both timings."""
    cases = [_case("ids", 1.0, 200.0, 0.1), _case("f32x8", 3.0, 300.0, 0.2)]
    for case, cat_ms in zip(cases, (0.4, 0.8), strict=True):
        case["pack"]["cat_list"] = _timing(cat_ms)
        case["ratios"]["impl_over_cat_floor_one"] = run.ratio(
            case["pack"]["impl_one"],
            {"median_s": (cat_ms + case["pack"]["floor_one"]["median_s"] * 1e3) / 1e3})
    goals = run.goals(cases)
    assert abs(goals["list of tensors"]["impl_over_cat_floor_max"] - 3.0) < 1e-9  # 3 / (0.8 + 0.2)
    assert "impl_over_cat_floor_max" not in goals["jagged nested tensor"]


def test_malloc_note_names_the_allocator_settings(monkeypatch: Any) -> None:
    """The report says under which glibc thresholds the timings were taken."""
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    assert machine.malloc_note().startswith("default")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", run.STEADY_MMAP)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", run.STEADY_TRIM)
    note = machine.malloc_note()
    assert note.startswith("steady") and run.STEADY_MMAP in note and run.STEADY_TRIM in note
