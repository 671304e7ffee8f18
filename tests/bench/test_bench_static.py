"""The planner's max_num_seqs recommendation, static graph keys and convention comparison.

Expected values come from ``reference.plan_thd`` (which micro-batches a max_num_seqs refuses,
the totals per convention), never from the planner.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench import plan as planner
from bench.conventions import compare_conventions, convention_grid, parse_fp8
from bench.lengths import synthetic_stream
from bench.settings import PackSettings
from bench.static import recommend_max_num_seqs
from thd_packing import reference


def _refuses(lengths: list[int], settings: PackSettings, n: int) -> bool:
    """Whether the literal spec refuses this micro-batch under max_num_seqs = n (R-ERR-13)."""
    cfg = reference.PackConfig(**settings.replace(max_num_seqs=n).config_kwargs(None))
    try:
        reference.plan_thd(lengths, cfg)
    except ValueError:
        return True
    return False


def _batches(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(0, 300) for _ in range(rng.choice([1, 2, 3, 5, 8, 13, 20]))]
            for _ in range(40)]


@pytest.mark.rules("R-ERR-13", "R-STATIC-1")
@pytest.mark.parametrize("tail", ["last", "segment"])
@pytest.mark.parametrize("limit", [0.0, 10.0, 50.0])
@pytest.mark.parametrize("arith", ["impl", "reference"])
def test_max_num_seqs_is_the_smallest_within_the_overflow_limit(tail: str, limit: float,
                                                                arith: str) -> None:
    """Its overflow rates are the share of micro-batches the spec refuses; N - 1 exceeds it."""
    settings = PackSettings(cp_size=2, tail=tail)
    batches = _batches(7)
    report = recommend_max_num_seqs(batches, settings, limit, arith=arith)

    def rate(n: int) -> float:
        return 100 * sum(_refuses(b, settings, n) for b in batches) / len(batches)

    n = report.max_num_seqs
    assert report.overflow_pct == pytest.approx(rate(n)) and rate(n) <= limit
    assert n == 1 or rate(n - 1) > limit
    for cand, pct in report.candidates:
        assert pct == pytest.approx(rate(cand))
    assert n in [c for c, _ in report.candidates]
    if limit == 0.0:  # every micro-batch fits: B entries, plus the padding segment's
        assert n == max(len(b) for b in batches) + (tail == "segment")


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-STATIC-3")
@pytest.mark.parametrize("settings", [PackSettings(cp_size=4), PackSettings(
    tp_size=2, cp_size=2, tail="segment", seq_align="cp", fp8="mxfp8")], ids=["cp4", "conv"])
def test_static_keys_are_the_bucketed_totals(settings: PackSettings) -> None:
    """With max_num_seqs and max_seqlen="total" a key is fixed by the total; without, it is not.

    Micro-batches that N refuses are counted, not keyed.
    """
    batches = planner.greedy_microbatches(synthetic_stream("lognormal", max_len=2048, seed=4),
                                          8192, 48)
    n = max(len(b) for b in batches) - 2  # so that some overflow
    reports = planner.evaluate(batches, settings, [None, 1024, 4096], max_num_seqs=n)
    for r in reports:
        kept = [b for b in batches if not _refuses(b, settings, n)]
        assert r.static_overflows == len(batches) - len(kept) > 0
        totals = {reference.plan_thd(b, reference.PackConfig(
            **settings.config_kwargs(r.bucket))).total for b in kept}
        assert r.static_graph_keys == len(totals)
        assert r.graph_keys > r.static_graph_keys
    # A bucket caps the shapes but not the keys as planned: B and max_seqlen still vary.
    assert reports[2].distinct_shapes <= 3 < reports[2].graph_keys


@pytest.mark.rules("R-TAIL-1", "R-ALIGN-5", "R-FP8-1", "R-TOTAL-2")
def test_conventions_side_by_side_follow_the_spec() -> None:
    """Each row's padding is the spec's under that convention; the tail moves rows only."""
    batches = planner.greedy_microbatches(synthetic_stream("lognormal", seed=2), 16384, 24)
    base = PackSettings(tp_size=2, cp_size=4)
    grid = convention_grid(base, ["last", "segment"], ["tp_cp", "cp"],
                           [False, True, "mxfp8", "nvfp4"])
    assert len(grid) == 16
    rows = compare_conventions(batches, grid, 1024)
    real = sum(map(sum, batches))
    for row in rows:
        for report, bucket in ((row.none, None), (row.bucketed, 1024)):
            assert report is not None
            totals = [reference.plan_thd(b, reference.PackConfig(
                **row.settings.config_kwargs(bucket))).total for b in batches]
            assert report.total_pct == pytest.approx(100 * (sum(totals) - real) / real)
        need = max(len(b) for b in batches) + (row.settings.tail == "segment")
        assert row.max_num_seqs.max_num_seqs == need
    by = {(r.settings.tail, r.settings.seq_align, r.settings.fp8): r for r in rows}
    for (tail, align, fp8), r in by.items():
        if tail == "segment":
            assert r.none.total_pct == by[("last", align, fp8)].none.total_pct
        if align == "cp":  # tp leaves the per-sequence alignment: never more padding
            assert r.none.total_pct <= by[(tail, "tp_cp", fp8)].none.total_pct
    assert by[("last", "cp", False)].none.total_pct < by[("last", "tp_cp", False)].none.total_pct


def test_parse_fp8() -> None:
    assert [parse_fp8(t) for t in ("False", "True", "mxfp8")] == [False, True, "mxfp8"]
    with pytest.raises(ValueError, match="fp8 must be one of"):
        parse_fp8("fp4")


def test_settings_pass_defaults_by_omission() -> None:
    """A default convention field is not passed, so a PackConfig without the field still works."""
    kw = PackSettings().config_kwargs(512)
    assert kw == {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False,
                  "bucket": 512, "min_local_rows": None}
    kw = PackSettings(tail="segment", max_num_seqs=4).config_kwargs(None)
    assert kw["tail"] == "segment" and kw["max_num_seqs"] == 4 and "seq_align" not in kw


def test_cli_compares_conventions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    code = planner.main(["--dist", "lognormal", "--tokens-per-mb", "8192", "--micro-batches",
                         "32", "--tp", "2", "--cp", "2", "--tail", "last,segment",
                         "--seq-align", "tp_cp,cp", "--fp8", "False,mxfp8", "--max-overflow",
                         "5", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "recommended max_num_seqs:" in text and "conventions side by side" in text
    payload = json.loads(out.read_text())
    assert len(payload["conventions"]) == 8
    mns = payload["max_num_seqs"]
    assert mns["overflow_pct"] <= 5 and mns["evaluated"] == mns["recommended"]
    assert {c["settings"]["fp8"] for c in payload["conventions"]} == {False, "mxfp8"}


def test_cli_rejects_unknown_convention(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        planner.main(["--dist", "uniform", "--tokens-per-mb", "100", "--fp8", "fp4"])
    assert exc.value.code == 2
    assert "fp8 must be one of" in capsys.readouterr().err


@pytest.mark.rules("R-STATIC-2", "R-META-4")
def test_max_seqlen_cost_from_the_plans() -> None:
    """Exact max_seqlen is max(P_k) over B entries; total is T over N entries (spec plans)."""
    from bench.static import FA2_BLOCK_M, max_seqlen_cost

    batches = [[300, 5], [700], [1, 2, 3]]
    settings = PackSettings(cp_size=2)
    cost = max_seqlen_cost(batches, settings, 1024, 3)
    exact = [reference.plan_thd(b, reference.PackConfig(cp_size=2, bucket=1024))
             for b in batches]
    assert cost.exact_max_seqlen == pytest.approx(sum(max(p.seqlens_padded) for p in exact) / 3)
    assert cost.total_max_seqlen == 1024  # every total is one bucket here
    assert cost.grid_total == 3 * 1024 // FA2_BLOCK_M
    grid_exact = [len(b) * -(-int(max(p.seqlens_padded)) // FA2_BLOCK_M)
                  for b, p in zip(batches, exact, strict=True)]
    assert cost.grid_exact == pytest.approx(sum(grid_exact) / 3)
    assert cost.scores_total == 3 * 1024**2
    with pytest.raises(ValueError, match="refuses every micro-batch"):
        max_seqlen_cost([[1, 2, 3, 4]], settings, None, 2)
