"""The end-to-end bin planner (bench/binplan.py): its figures, read against plans built here."""

from __future__ import annotations

import pytest

import impl
from bench import binplan
from impl import bins as ib

STEPS = [[900, 40, 3000, 7, 512, 2048, 33, 1000, 64, 1500, 700, 5]] * 2


def test_rows_never_over_capacity_tokens_are() -> None:
    """R-BIN-5: under cost="rows" no pack exceeds the capacity; the same number as a token
    budget gives packs that do (tp 2, cp 4: every sequence pads to a multiple of 16)."""
    pack = impl.PackConfig(tp_size=2, cp_size=4)
    rows = binplan.evaluate(STEPS, pack, 4096, "rows", "first_fit_decreasing", 2)
    tokens = binplan.evaluate(STEPS, pack, 4096, "tokens", "first_fit_decreasing", 2)
    assert rows.over_capacity == 0 and tokens.over_capacity > 0
    assert rows.tokens == tokens.tokens == 2 * sum(STEPS[0])
    # The padding figure is the packs' rows over the real tokens, recomputed here.
    config = ib.BinConfig(4096, cost="rows", pack=pack, bins_multiple_of=2, min_bins=2)
    totals = [impl.plan_thd(b, pack).total for b in ib.bin_lengths(STEPS[0], config).lengths()]
    assert rows.rows == 2 * sum(totals)
    assert rows.packs == 2 * len(totals) and rows.packs % 2 == 0


def test_cli_prints_table_and_a_config_that_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert binplan.main(["--dist", "lognormal", "--capacities", "8192", "--buckets", "none,512",
                         "--tp", "2", "--cp", "2", "--dp", "4", "--step", "256",
                         "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "over cap" in out and out.count(" rows ") >= 2
    code = out.split("recommended (least padding plus imbalance under cost='rows'):\n")[1]
    names = {"PackConfig": impl.PackConfig, "BinConfig": ib.BinConfig,
             "bin_lengths": ib.bin_lengths, "ranks": ib.ranks,
             "step_lengths": [3000, 5000, 100, 8000], "dp_rank": 0}
    exec(code, names)  # the pasted config runs as printed
    assert all(p.total <= 8192 for p in ib.plans(names["bins"], names["config"]))


def test_cli_rejects_bad_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        binplan.main(["--dist", "uniform", "--capacities", "0"])
    assert "--capacities" in capsys.readouterr().err
    assert binplan.main(["--dist", "uniform", "--capacities", "8", "--tp", "2", "--cp", "4",
                         "--steps", "1", "--step", "4"]) == 2
    assert "capacity=8" in capsys.readouterr().err
