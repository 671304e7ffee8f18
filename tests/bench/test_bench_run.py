"""The benchmark (bench/run.py): its table from a report, and one tiny run end to end."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from bench import run


def _t(ms: float) -> dict[str, Any]:
    return {"median_s": ms / 1e3, "iqr_s": 0.0, "runs": 5, "calls_per_run": 1}


def test_table_carries_the_medians_and_their_ratios() -> None:
    quiet, busy = run.HOSTS
    report = {
        "meta": {"threads": 2, "device": "cpu"},
        "case": {"B": 256, "cp": 4, "bucket": 512},
        "payloads": [{"payload": "ids", "local_rows": 1000, "checks": {},
                      quiet: {"load_1m_at_start": 1.0, "impl_list": _t(4.0),
                              "impl_nested": _t(2.0), "verl": _t(400.0), "floor": _t(0.5)},
                      busy: {"load_1m_at_start": 3.0, "impl_list": _t(9.0),
                             "impl_nested": _t(3.0), "floor": _t(1.5)}}],
    }
    rows = [line for line in run.format_table(report).splitlines() if line.startswith("| ids")]
    assert rows == [
        f"| ids | {quiet} (1.0) | 1000 | 4 | 2 | 400 | 0.5 | 200 | 4 | 8 |",
        f"| ids | {busy} (3.0) | 1000 | 9 | 3 | - | 1.5 | - | 2 | 6 |",
    ]


def test_tiny_run_times_every_contender_and_checks_rows(tmp_path: Path) -> None:
    """B = 8, a few ms per measurement: every column timed, impl's rows equal verl's."""
    with_verl = importlib.util.find_spec("verl") is not None
    out = tmp_path / "bench.json"
    args = ["--batch", "8", "--cp", "2", "--min-run-time", "0.01", "--out", str(out)]
    assert run.main(args + ([] if with_verl else ["--no-verl"])) == 0
    report = json.loads(out.read_text())
    quiet, busy = run.HOSTS
    for entry in report["payloads"]:
        assert entry[quiet].keys() >= {"impl_list", "impl_nested", "floor"}
        assert entry[busy].keys() >= {"impl_list", "impl_nested", "floor"}
        assert all(entry[quiet][k]["median_s"] > 0 for k in ("impl_list", "floor"))
        assert entry["checks"]["impl_nested_rows_equal"] is True
        if with_verl:
            assert "verl" in entry[quiet] and "verl" not in entry[busy]
            assert entry["checks"]["verl_rows_equal"] is True
    assert report["meta"]["threads"] >= 1 and "load_1m_at_end" in report["meta"]
    if not with_verl:
        pytest.skip("verl 0.9.1 not installed: impl and the floor only (`nox -s tests` has it)")
