"""Recompiles of `torch.compile(dynamic=False)` over a stream of packed micro-batches, with and
without the bucket (R-TOTAL-4: the bucket fixes the packed total to a multiple of itself).

The block (qkv projection, per-sequence causal attention from segment ids, output projection) sees
only tensors whose shape is the packed total, so the number of graphs is the number of distinct
totals. Both counts are reported (terminal summary, report.json, summary.md). Every real token of
every micro-batch is also checked against the fp32 per-sequence reference.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not importable")

import impl  # noqa: E402
from gpu_tests.compile_check import PackedBlock, compile_stream, stream_batches  # noqa: E402

BUCKET = 512
STREAM = stream_batches(seed=3, count=8, max_len=300)


@pytest.mark.rules("R-TOTAL-4", "R-TOTAL-5")
def test_bucket_bounds_recompiles(gpu_report: dict[str, Any]) -> None:
    """With the bucket: no more graphs than distinct bucketed totals; without: one per total."""
    backend = os.environ.get("GPU_TESTS_COMPILE_BACKEND", "inductor")
    torch.manual_seed(0)
    block = PackedBlock(hidden=64, heads=4).cuda()
    plain = compile_stream(impl, block, STREAM, impl.PackConfig(), backend=backend, device="cuda")
    bucketed = compile_stream(
        impl, block, STREAM, impl.PackConfig(bucket=BUCKET), backend=backend, device="cuda"
    )
    counts = {
        "backend": backend,
        "micro_batches": len(STREAM),
        "graphs_without_bucket": plain.graphs,
        "distinct_totals_without_bucket": len(set(plain.totals)),
        "graphs_with_bucket": bucketed.graphs,
        "distinct_totals_with_bucket": len(set(bucketed.totals)),
        "max_abs_error_vs_fp32": max(plain.max_error, bucketed.max_error),
    }
    gpu_report["recompiles"] = counts
    print(f"recompiles: {counts}")
    assert len(set(plain.totals)) > len(set(bucketed.totals)), "stream does not exercise the bucket"
    assert plain.graphs == len(set(plain.totals))
    assert 1 <= bucketed.graphs <= len(set(bucketed.totals))
