"""The bucket planner: its arithmetic against the spec's plan, micro-batching, recommendation, CLI.

Expected totals come from ``reference.plan_thd`` (the literal spec) or from hand arithmetic in
the spec's worked examples, never from the planner itself.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import impl
from bench import plan as planner
from bench.lengths import synthetic_stream
from thd_packing import reference

BUCKETS = (None, 1, 3, 16, 100, 512, 1024)


def _random_settings(rng: random.Random) -> planner.PackSettings:
    return planner.PackSettings(
        tp_size=rng.choice([1, 2, 3, 8]),
        cp_size=rng.choice([1, 2, 4, 3]),
        cp_layout=rng.choice(["zigzag", "contiguous"]),
        fp8=rng.choice([False, False, True, "tensor", "mxfp8", "block", "nvfp4"]),
        min_local_rows=rng.choice([None, None, 1, 7, 300]),
        tail=rng.choice(["last", "segment"]),
        seq_align=rng.choice(["tp_cp", "cp"]),
    )


def _random_batches(rng: random.Random) -> list[list[int]]:
    return [[rng.choice([0, 1, 2, 5, 17, rng.randrange(0, 3000)])
             for _ in range(rng.randrange(1, 9))] for _ in range(rng.randrange(1, 7))]


def _ref_plan(lengths: list[int], settings: planner.PackSettings,
              bucket: int | None) -> reference.Plan:
    """The literal spec's plan for one micro-batch."""
    cfg = reference.PackConfig(tp_size=settings.tp_size, cp_size=settings.cp_size,
                               cp_layout=settings.cp_layout, fp8=settings.fp8, bucket=bucket,
                               min_local_rows=settings.min_local_rows, tail=settings.tail,
                               seq_align=settings.seq_align)
    return reference.plan_thd(lengths, cfg)


@pytest.mark.rules("R-ALIGN-1", "R-ALIGN-2", "R-ALIGN-3", "R-ALIGN-5", "R-FP8-1", "R-TOTAL-1",
                   "R-TOTAL-2", "R-TOTAL-3", "R-TOTAL-4", "R-TAIL-1", "R-META-5")
@pytest.mark.parametrize("arith", ["impl", "reference"])
def test_planner_totals_match_spec_plan(arith: str) -> None:
    """On random micro-batches and configs (every convention), each number follows the spec."""
    rng = random.Random(1234)
    for _ in range(60):
        settings = _random_settings(rng)
        batches = _random_batches(rng)
        reports = planner.evaluate(batches, settings, BUCKETS, arith=arith)
        assert [r.bucket for r in reports] == list(BUCKETS)
        real = sum(map(sum, batches))
        base = sum(_ref_plan(b, settings, None).total for b in batches)
        for report in reports:
            plans = [_ref_plan(b, settings, report.bucket) for b in batches]
            local = [p.local_rows for p in plans]
            assert report.real_tokens == real
            assert report.align_rows == base - real
            assert report.bucket_rows == sum(p.total for p in plans) - base
            assert report.distinct_shapes == len(set(local))
            assert report.shapes == sorted(set(local))
            assert report.worst_local_rows == max(local)
            assert report.worst_total == max(p.total for p in plans)
            keys = {(p.local_rows, len(p.cu_seqlens), len(p.cu_seqlens_padded), p.max_seqlen,
                     p.total) for p in plans}
            assert report.graph_keys == len(keys)
            if real:
                assert report.total_pct == pytest.approx(
                    100 * (sum(p.total for p in plans) - real) / real)


@pytest.mark.rules("R-TOTAL-4", "R-TOTAL-5", "R-ALIGN-1", "R-ALIGN-3")
def test_planner_on_spec_examples() -> None:
    """Spec 13.1 (513 tokens, bucket 512 -> 1024 rows) and 13.2 (zigzag cp=2: [3, 5] -> 12)."""
    (none, b512) = planner.evaluate([[513]], planner.PackSettings(), [None, 512])
    assert (none.align_rows, none.bucket_rows, none.worst_total) == (0, 0, 513)
    assert (b512.align_rows, b512.bucket_rows, b512.worst_total) == (0, 511, 1024)
    assert b512.bucket_pct == pytest.approx(100 * 511 / 513)
    (zz,) = planner.evaluate([[3, 5]], planner.PackSettings(cp_size=2), [None])
    assert (zz.align_rows, zz.worst_total, zz.worst_local_rows) == (4, 12, 6)


@pytest.mark.rules("R-TOTAL-4")
def test_bucket_caps_distinct_shapes() -> None:
    """Totals are multiples of the bucket: at most worst_total / bucket shapes per rank."""
    batches = planner.greedy_microbatches(synthetic_stream("uniform", seed=3), 16384, 64)
    reports = planner.evaluate(batches, planner.PackSettings(cp_size=4), [None, 2048])
    none, bucketed = reports
    assert bucketed.distinct_shapes <= bucketed.worst_total // 2048
    assert all(s * 4 % 2048 == 0 for s in bucketed.shapes)
    assert bucketed.distinct_shapes < none.distinct_shapes
    assert bucketed.bucket_rows > 0 and none.bucket_rows == 0


def test_greedy_microbatches_keep_order_and_budget() -> None:
    """Greedy packing is a split of the input prefix; each part fits, and the next sample not."""
    rng = random.Random(5)
    lengths = [rng.randrange(0, 1000) for _ in range(500)]
    batches = planner.greedy_microbatches(lengths, 2500, 1000)
    flat = [n for b in batches for n in b]
    assert flat == lengths
    assert all(sum(b) <= 2500 for b in batches)
    assert all(sum(a) + b[0] > 2500 for a, b in zip(batches, batches[1:], strict=False))
    assert len(planner.greedy_microbatches(lengths, 2500, 3)) == 3


def test_balanced_microbatches_partition_each_window() -> None:
    """Balanced packing keeps every sample of a window exactly once and fits every budget."""
    rng = random.Random(6)
    lengths = [rng.randrange(1, 1000) for _ in range(300)]
    batches = planner.balanced_microbatches(lengths, 3000, 10_000, window=100)
    assert all(sum(b) <= 3000 for b in batches)
    assert Counter(n for b in batches for n in b) == Counter(lengths)
    greedy = planner.greedy_microbatches(lengths, 3000, 10_000)
    spread = [sum(b) for b in batches]
    assert max(spread) - min(spread) <= max(sum(b) for b in greedy) - min(sum(b) for b in greedy)


def test_sample_longer_than_budget_is_rejected() -> None:
    with pytest.raises(ValueError, match="sample 2 has 900 tokens, more than the token budget"):
        planner.greedy_microbatches([1, 2, 900], 800, 5)
    with pytest.raises(ValueError, match="sample 2 has 900 tokens"):
        planner.balanced_microbatches([1, 2, 900], 800, 5)
    with pytest.raises(ValueError, match="tokens per micro-batch"):
        planner.greedy_microbatches([1], 0, 5)


def _report(bucket: int | None, shapes: int, bucket_pct: float) -> planner.BucketReport:
    return planner.BucketReport(bucket=bucket, micro_batches=1, real_tokens=100, align_rows=0,
                                bucket_rows=int(bucket_pct), align_pct=1.0,
                                bucket_pct=bucket_pct, total_pct=1.0 + bucket_pct,
                                distinct_shapes=shapes, worst_local_rows=1, worst_total=1)


def test_recommend_fewest_shapes_under_limit() -> None:
    reports = [_report(None, 50, 0.0), _report(256, 10, 2.0), _report(512, 6, 4.0),
               _report(1024, 3, 9.0), _report(2048, 3, 12.0)]
    assert planner.recommend(reports, 5.0).bucket == 512
    assert planner.recommend(reports, 10.0).bucket == 1024  # ties: the lower overhead
    assert planner.recommend(reports, 0.0).bucket is None  # "none" always qualifies
    with pytest.raises(ValueError, match="max overhead"):
        planner.recommend(reports, -1.0)


def test_synthetic_streams_are_seeded_and_bounded() -> None:
    for name in ("uniform", "lognormal", "longtail"):
        a = [n for n, _ in zip(synthetic_stream(name, max_len=300, seed=1), range(5000),
                               strict=False)]
        b = [n for n, _ in zip(synthetic_stream(name, max_len=300, seed=1), range(5000),
                               strict=False)]
        assert a == b and min(a) >= 1 and max(a) <= 300
    with pytest.raises(ValueError, match="unknown distribution 'zipf'"):
        next(synthetic_stream("zipf"))


def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A length file in, a table, a recommendation and a JSON report out."""
    lengths = tmp_path / "lengths.jsonl"
    lengths.write_text("".join(json.dumps({"length": 100 + 37 * i % 900}) + "\n"
                               for i in range(400)))
    out = tmp_path / "plan.json"
    code = planner.main(["--lengths", str(lengths), "--tokens-per-mb", "4096", "--cp", "2",
                         "--buckets", "none,256,1024", "--max-overhead", "50",
                         "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "recommended bucket:" in text
    payload = json.loads(out.read_text())
    assert [r["bucket"] for r in payload["reports"]] == [None, 256, 1024]
    assert payload["recommended"] in (None, 256, 1024)


def test_cli_reports_bad_file_clearly(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("length\n12\n-3\n")
    assert planner.main(["--lengths", str(bad), "--tokens-per-mb", "100"]) == 2
    assert f"{bad}:3: negative length -3" in capsys.readouterr().err


def test_cli_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "curve.png"
    assert planner.main(["--dist", "lognormal", "--tokens-per-mb", "8192",
                         "--micro-batches", "32", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _printed_block(text: str, header: str) -> list[str]:
    """The indented lines under the first line of ``text`` that starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header)) + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        block.append(line[4:])
    return block


def _verl_engine_yaml_keys(yaml: Any) -> set[str]:
    """The keys of verl 0.9.1's own engine/megatron.yaml, read from the installed wheel (which
    `nox -s tests` installs --no-deps: the file is read, verl is not imported)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl 0.9.1 is not installed (`nox -s tests` installs it)")
    path = Path(spec.submodule_search_locations[0]) / "trainer/config/engine/megatron.yaml"
    return set(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("args", [["--cp", "4"], ["--tp", "2", "--cp", "2", "--buckets", "none"]])
def test_printed_config_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    args: list[str]) -> None:
    """The PackConfig and resolve_engine_config lines eval to the recommended config, and the
    YAML keys are verl's own, parse, and map back to it (with the fields verl has no key for)."""
    yaml = pytest.importorskip("yaml", reason="pyyaml is a test dependency (pyproject.toml)")
    out = tmp_path / "plan.json"
    assert planner.main(["--dist", "lognormal", "--tokens-per-mb", "8192", "--micro-batches",
                         "32", "--json", str(out), *args]) == 0
    text = capsys.readouterr().out
    payload = json.loads(out.read_text())
    bucket, n = payload["recommended"], payload["max_num_seqs"]["recommended"]
    tp = int(args[args.index("--tp") + 1]) if "--tp" in args else 1
    cp = int(args[args.index("--cp") + 1])
    static = {} if bucket is None else {"max_num_seqs": n, "max_seqlen": "total"}
    want = impl.PackConfig(tp_size=tp, cp_size=cp, bucket=bucket, **static)

    python = _printed_block(text, "config to paste (Python")
    names = {"PackConfig": impl.PackConfig, "resolve_engine_config": impl.resolve_engine_config}
    assert python[0].startswith("PackConfig(") and eval(python[0], names) == want
    assert python[1].startswith("resolve_engine_config(") and eval(python[1], names) == want

    block = _printed_block(text, "verl engine YAML")
    keys = yaml.safe_load("\n".join(block))
    assert set(keys) <= _verl_engine_yaml_keys(yaml)
    no_key = dict(line.removeprefix("# no verl key: ").split(" (")[0].split("=", 1)
                  for line in block if line.startswith("#"))
    extra = {name: ast.literal_eval(value) for name, value in no_key.items()}
    assert extra == static
    back = impl.resolve_engine_config(
        tp_size=keys["tensor_model_parallel_size"], cp_size=keys["context_parallel_size"],
        use_remove_padding=keys["use_remove_padding"], pad_to_length=keys["pad_to_length"],
        pad_to_length_bucket=keys.get("pad_to_length_bucket", 512), **extra)
    assert back == want


def test_config_verl_cannot_express_is_named() -> None:
    """A tail, seq_align or FP8 recipe: no resolve_engine_config call, each named in the YAML."""
    from bench.recommendation import (
        engine_call_text,
        packconfig_text,
        recommended_config,
        verl_engine_keys,
    )

    settings = planner.PackSettings(cp_size=2, tail="segment", seq_align="cp", fp8="mxfp8")
    kwargs = recommended_config(settings, 512, 9)
    assert eval(packconfig_text(kwargs), {"PackConfig": impl.PackConfig}) == impl.PackConfig(
        cp_size=2, tail="segment", seq_align="cp", fp8="mxfp8", bucket=512, max_num_seqs=9,
        max_seqlen="total")
    assert engine_call_text(kwargs) is None
    keys, missing = verl_engine_keys(kwargs)
    assert keys == {"tensor_model_parallel_size": 1, "context_parallel_size": 2,
                    "use_remove_padding": True, "pad_to_length": True, "pad_to_length_bucket": 512}
    assert set(missing) == {"fp8", "tail", "seq_align", "max_num_seqs", "max_seqlen"}


def test_plot_draws_graph_keys_beside_row_shapes(tmp_path: Path) -> None:
    """Both graph-key series (as planned, static) are drawn, from the reports' own counts."""
    pytest.importorskip("matplotlib")
    batches = planner.greedy_microbatches(synthetic_stream("uniform", seed=3), 16384, 32)
    reports = planner.evaluate(batches, planner.PackSettings(cp_size=4), [None, 512, 2048],
                               max_num_seqs=40)
    drawn = planner.plot(reports, reports[-1], str(tmp_path / "p.png"), "PackConfig()")
    assert drawn == ["row shapes per rank", "graph keys, metadata as planned",
                     "graph keys, static metadata"]
    series = planner.plot_series(reports)
    assert series["graph keys, metadata as planned"] == [r.graph_keys for r in reports]
    assert series["graph keys, static metadata"] == [r.static_graph_keys for r in reports]
    # a bucket alone leaves the keys varying; static metadata brings them to the row shapes
    assert series["graph keys, metadata as planned"][2] > series["row shapes per rank"][2]
    assert series["graph keys, static metadata"][2] == series["row shapes per rank"][2]


def test_cli_seq_align_none_and_fixed_total(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Spec 1.2: --seq-align none and --fixed-total N are accepted, shown in the conventions
    table, and the fixed total reaches the config to paste (which builds, R-TOTAL-7); every
    pack of the JSON report is then N rows."""
    out = tmp_path / "plan.json"
    assert planner.main(["--dist", "lognormal", "--tokens-per-mb", "2048", "--micro-batches",
                         "8", "--cp", "2", "--layout", "contiguous", "--seq-align", "none",
                         "--tail", "last,segment", "--fixed-total", "8192",
                         "--json", str(out)]) == 0
    text = capsys.readouterr().out
    table = text[text.index("conventions side by side"):]
    assert "pid segs" in table
    rows = [line.split() for line in table.splitlines() if line.startswith(("last", "segment"))]
    assert [(r[0], r[1], r[3]) for r in rows] == [("last", "none", "8192"),
                                                  ("segment", "none", "8192")]
    payload = json.loads(out.read_text())
    assert payload["config"]["fixed_total"] == 8192 and payload["config"]["bucket"] is None
    assert impl.PackConfig(**payload["config"]).fixed_total == 8192
    assert all(r["worst_total"] == 8192 for r in payload["reports"])
    # segments derived from position ids: each non-empty sequence, plus the padding segment
    # under tail='segment' (one more than under 'last', R-PID-3)
    last, segment = (int(r[-1]) for r in rows)
    assert segment == last + 1


def test_cli_fixed_total_too_small_names_the_smallest(capsys: pytest.CaptureFixture[str]) -> None:
    """A fixed total some micro-batch needs more than: exit 2, naming N, how many micro-batches
    need more and the smallest total that holds them all (R-ERR-15), never a truncation."""
    assert planner.main(["--dist", "lognormal", "--tokens-per-mb", "4096", "--micro-batches",
                         "8", "--fixed-total", "64"]) == 2
    err = capsys.readouterr().err
    assert "fixed_total=64 is too small for 8 of 8 micro-batches" in err
    assert "the smallest that holds them all is" in err


def test_cli_seq_align_none_refused_under_zigzag(capsys: pytest.CaptureFixture[str]) -> None:
    """R-ERR-14: seq_align none with zigzag at cp > 1 is an error naming both fields."""
    assert planner.main(["--dist", "lognormal", "--tokens-per-mb", "2048", "--micro-batches",
                         "4", "--cp", "2", "--seq-align", "none"]) == 2
    err = capsys.readouterr().err
    assert "seq_align='none'" in err and "cp_layout='zigzag'" in err
