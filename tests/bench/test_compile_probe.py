"""The honest compile probe: what a varlen-attention consumer recompiles for.

Micro-batches, totals and entry counts are checked against ``reference.plan_thd`` (the literal
spec); the stand-in attention against a per-sequence loop written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.compile_probe import HIDDEN, PaddedSDPAProbe, make_probe, measure_compile
from bench.settings import PackSettings
from thd_packing import reference


def _batches() -> list[list[int]]:
    """Six micro-batches of different B and totals that all round to one bucket of 512."""
    return [[100, 200, 150], [30, 40, 50, 60, 70], [500], [1, 2, 3, 4, 5, 6, 7, 8],
            [250, 250], [90, 91, 92, 93]]


def _ref(lengths: list[int], settings: PackSettings, bucket: int | None) -> reference.Plan:
    return reference.plan_thd(lengths, reference.PackConfig(**settings.config_kwargs(bucket)))


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-TOTAL-4")
@pytest.mark.parametrize("settings", [PackSettings(), PackSettings(cp_size=2, tail="segment")],
                         ids=["cp1-last", "cp2-segment"])
def test_static_metadata_compiles_once_bucket_alone_does_not(settings: PackSettings) -> None:
    """Different B and totals in one bucket: one graph with static metadata, many without."""
    batches = _batches()
    plain = [_ref(b, settings, None) for b in batches]
    bucketed = [_ref(b, settings, 512) for b in batches]
    assert len({len(b) for b in batches}) > 1 and len({p.total for p in plain}) > 1
    assert {p.total for p in bucketed} == {512}  # one bucket: the rows alone never change
    n = max(len(b) for b in batches) + (settings.tail == "segment")
    results = measure_compile(batches, settings, 512, n, backend="eager")
    by = {r["variant"]: r for r in results}
    assert set(by) == {"no bucket", "bucket only", "bucket + static"}
    for r in results:
        assert r["graph_breaks"] == 0
        assert r["graphs"] == r["unique_graphs"] == r["graph_keys"]
    # Bucket only: cu_seqlens* lengths (B + 1, or B + 2 with the segment) and max_seqlen vary.
    expected = {(len(p.cu_seqlens_padded), p.max_seqlen) for p in bucketed}
    assert by["bucket only"]["graphs"] == len(expected) > 1
    assert by["no bucket"]["graphs"] > 1
    assert by["bucket + static"]["graphs"] == 1
    assert by["bucket + static"]["totals"] == [512]


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2")
def test_stand_in_attention_is_per_sequence_causal() -> None:
    """The stand-in equals causal attention run on each sequence alone, with static metadata
    (zero-length trailing entries, max_seqlen = T) giving the same rows as the exact plan."""
    torch.manual_seed(0)
    lengths = [5, 1, 9, 0, 3]
    probe = PaddedSDPAProbe().eval()
    outs = []
    for extra in ({}, {"max_num_seqs": 8, "max_seqlen": "total", "bucket": 64}):
        cfg = reference.PackConfig(**extra)
        plan = reference.plan_thd(lengths, cfg)
        x = torch.randn(plan.local_rows, HIDDEN, generator=torch.Generator().manual_seed(1))
        cu_p = torch.as_tensor(plan.cu_seqlens_padded)
        with torch.no_grad():
            got = probe(x, cu_p, torch.as_tensor(plan.cu_seqlens), int(plan.max_seqlen))
        for k, n in enumerate(lengths):
            start = int(cu_p[k])
            if n == 0:
                continue
            rows = x[start:start + n]
            with torch.no_grad():
                q, kk, v = probe.qkv(rows).chunk(3, dim=-1)
                d = HIDDEN // probe.heads
                heads = [t.view(n, probe.heads, d).transpose(0, 1) for t in (q, kk, v)]
                att = torch.nn.functional.scaled_dot_product_attention(*heads, is_causal=True)
                want = probe.out(att.transpose(0, 1).reshape(n, HIDDEN))
            torch.testing.assert_close(got[start:start + n], want, rtol=1e-5, atol=1e-5)
        real = torch.zeros(plan.local_rows, dtype=torch.bool)
        for k, n in enumerate(lengths):
            real[int(cu_p[k]):int(cu_p[k]) + n] = True
        with torch.no_grad():
            torch.testing.assert_close(got[~real], probe.out.bias.expand(int((~real).sum()), -1))
        outs.append(got[real])
    torch.testing.assert_close(outs[0], outs[1])


def test_varlen_attn_probe_needs_cuda() -> None:
    with pytest.raises(ValueError, match="needs a CUDA device"):
        make_probe("varlen_attn", 1, torch.device("cpu"))
    with pytest.raises(ValueError, match="probe must be one of"):
        make_probe("flash", 1, torch.device("cpu"))


def test_cli_reports_three_variants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.compile_probe`: the recommended max_num_seqs fits every micro-batch."""
    from bench.compile_probe import main

    out = tmp_path / "probe.json"
    assert main(["--backend", "eager", "--micro-batches", "3", "--max-len", "256",
                 "--tokens-per-mb", "1024", "--bucket", "1024", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "bucket + static" in text and "torch 2." in text
    payload = json.loads(out.read_text())
    by = {r["variant"]: r for r in payload["results"]}
    assert payload["max_num_seqs"] == max(by["bucket only"]["batch_sizes"])
    assert by["bucket + static"]["graphs"] == 1
    assert main(["--probe", "varlen_attn"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
