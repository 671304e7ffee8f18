"""CPU checks of the static-metadata GPU tests' plumbing (no GPU needed).

They show that (1) the static packs the GPU tests build have the shapes the spec promises and one
graph key across the CUDA-graph stream (several without static metadata), (2) the torch
fallbacks (per-sequence SDPA, the graph-safe dense one, varlen with the kernel emulated) on those
packs equal the fp32 reference with zero-length trailing entries and max_seqlen = T, (3) the
dense fallback has no host reads (dynamo traces it as one graph, and once for the whole stream),
(4) the graph test's load/run/read-back cycle is right when run eagerly, and (5) the negative
controls fail: a stale max_seqlen drops rows, a micro-batch with another graph key is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

import impl
from gpu_tests.cases import (
    CONVENTIONS,
    FP32_TOL,
    GRAPH_BUCKET,
    GRAPH_MAX_NUM_SEQS,
    GRAPH_STREAM,
    GRAPH_TP,
    all_batches,
    make_qkv,
)
from gpu_tests.compile_check import GraphCounter
from gpu_tests.cuda_graph import EagerRunner, run_stream
from gpu_tests.fallbacks import AttnMeta, attn_meta, sdpa_per_sequence, varlen_inflated
from gpu_tests.fp32_reference import (
    as_fp32,
    assert_identical,
    assert_matches_reference,
    reference_result,
)
from gpu_tests.packed_run import pad_row_mask, run_packed
from gpu_tests.static_meta import (
    declared_pad_between_seqs,
    dense_varlen_attention,
    graph_key,
    varlen_static,
)

from .fake_varlen import fake_varlen_attn

HEADS, HEAD_DIM = 2, 16
N = 8
CONFIGS: dict[str, dict[str, Any]] = {"tp1": {}, "tp2-fp8": {"tp_size": 2, "fp8": True}}
TAILS = ("last", "segment")
STATIC: dict[str, Any] = {"max_num_seqs": N, "max_seqlen": "total"}


def _graph_config(tail: str, static: bool) -> impl.PackConfig:
    extra = {"max_num_seqs": GRAPH_MAX_NUM_SEQS, "max_seqlen": "total"} if static else {}
    return impl.PackConfig(tp_size=GRAPH_TP, bucket=GRAPH_BUCKET, tail=tail, **extra)


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-STATIC-3", "R-TOTAL-4")
@pytest.mark.parametrize("tail", TAILS)
def test_graph_stream_has_one_key_only_with_static_metadata(tail: str) -> None:
    """The CUDA-graph stream (B = 1..7, one bucket): one graph key with max_num_seqs and
    max_seqlen="total"; with the bucket alone cu_seqlens changes length and max_seqlen changes."""
    sizes = {len(x) for x in GRAPH_STREAM}
    assert len(sizes) == len(GRAPH_STREAM) and max(sizes) < GRAPH_MAX_NUM_SEQS
    static = {graph_key(impl.plan_thd(list(x), _graph_config(tail, True))) for x in GRAPH_STREAM}
    assert static == {(GRAPH_BUCKET, GRAPH_MAX_NUM_SEQS + 1, GRAPH_MAX_NUM_SEQS + 1, GRAPH_BUCKET)}
    exact = [graph_key(impl.plan_thd(list(x), _graph_config(tail, False))) for x in GRAPH_STREAM]
    assert {k.total for k in exact} == {GRAPH_BUCKET}  # the bucket alone fixes the rows ...
    assert len({k.cu_seqlens_len for k in exact}) > 1  # ... but not the metadata
    assert len({k.max_seqlen for k in exact}) > 1


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-META-7")
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("batch", list(all_batches()))
def test_static_attn_meta_has_zero_length_tail_entries(batch: str, config: str, tail: str) -> None:
    """What the static GPU tests hand a kernel: N + 1 boundaries, entries past the content
    zero-length at offset T (real and padded), max_seqlen = T, B real sequences."""
    lengths = all_batches()[batch]
    plan = impl.plan_thd(lengths, impl.PackConfig(**CONFIGS[config], tail=tail, **STATIC))
    total = int(plan.total)
    for convention in CONVENTIONS:
        meta = attn_meta(plan, convention, "cpu")
        assert meta.cu_seqlens_q.shape == meta.cu_seqlens_q_padded.shape == (N + 1,)
        assert meta.max_seqlen_q == meta.max_seqlen_kv == total
    b = len(lengths)
    assert plan.num_seqs == b
    first_empty = b + (1 if tail == "segment" else 0)  # R-TAIL-1: the padding segment is entry B
    padded = plan.cu_seqlens_padded.tolist()
    real = plan.cu_seqlens.tolist()
    assert padded[first_empty:] == [total] * (N + 1 - first_empty)
    assert real[first_empty:] == [real[b]] * (N + 1 - first_empty)


def _fallback(name: str) -> Any:
    return {"sdpa": sdpa_per_sequence, "dense": dense_varlen_attention}[name]


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-TAIL-1", "R-META-6", "R-IN-2")
@pytest.mark.parametrize("backend", ["sdpa", "dense"])
@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("batch", ["zero-first-last", "mixed"])
def test_fallbacks_on_static_packs_match_reference(
    batch: str, config: str, tail: str, convention: str, backend: str
) -> None:
    """fp32 on the CPU: with and without static metadata the fallback equals the reference
    (outputs, q/k/v grads), pad rows (padded convention) and pad-row grads are zero, and static
    equals exact."""
    qkv = make_qkv(all_batches()[batch], HEADS, HEAD_DIM, seed=9, device="cpu", dtype=torch.float32)
    ref = reference_result(qkv)
    runs = []
    for extra in ({}, STATIC):
        cfg = impl.PackConfig(**CONFIGS[config], bucket=64, tail=tail, **extra)
        run = run_packed(impl, qkv, cfg, convention, _fallback(backend))
        what = f"{backend}/{convention}/{config}/{tail}/{extra}"
        assert_matches_reference(run.real, ref, FP32_TOL, what)
        pad = pad_row_mask(run.plan, "cpu")
        if convention == "padded":
            assert (run.out[pad] == 0).all(), what
        for grad in (run.dq, run.dk, run.dv):  # dout is 0 there; pad rows are a causal suffix
            assert (grad[pad] == 0).all(), what
        runs.append(run)
    if backend == "sdpa":
        assert_identical(runs[0].real, runs[1].real, f"{batch}/{config}/{tail}")
    else:
        assert_matches_reference(runs[1].real, as_fp32(runs[0].real), FP32_TOL, "static/exact")


@pytest.mark.rules("R-STATIC-2", "R-META-4")
def test_dense_fallback_with_a_stale_max_seqlen_is_wrong() -> None:
    """Negative control: a max_seqlen below a segment's length drops that segment's later rows
    (zero, finite) instead of raising, so the comparison with the reference fails."""
    lengths = [100, 100, 100]
    qkv = make_qkv([290, 10], HEADS, HEAD_DIM, seed=2, device="cpu", dtype=torch.float32)
    plan_short = impl.plan_thd(lengths, impl.PackConfig(max_num_seqs=4))

    def stale(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta) -> torch.Tensor:
        limit = int(plan_short.max_seqlen)
        return dense_varlen_attention(
            q, k, v, replace(meta, max_seqlen_q=limit, max_seqlen_kv=limit)
        )

    run = run_packed(impl, qkv, impl.PackConfig(max_num_seqs=4), "padded", stale)
    assert torch.isfinite(run.out).all()
    assert (run.real.out[0][100:] == 0).all()
    with pytest.raises(AssertionError):
        assert_matches_reference(run.real, reference_result(qkv), FP32_TOL, "stale")



@pytest.mark.rules("R-STATIC-1", "R-STATIC-2")
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_varlen_paths_on_static_packs(
    convention: str, tail: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The varlen calls the static GPU tests make (zero-length trailing entries, max_seqlen = T)
    are right with the kernel emulated; varlen_static refuses the padded convention."""
    import torch.nn.attention.varlen as varlen_mod

    monkeypatch.setattr(varlen_mod, "varlen_attn", fake_varlen_attn)
    qkv = make_qkv([0, 17, 0, 40, 2], HEADS, HEAD_DIM, seed=5, device="cpu", dtype=torch.float32)
    cfg = impl.PackConfig(tp_size=4, bucket=64, tail=tail, **STATIC)
    fn = varlen_static if convention == "verl" else varlen_inflated
    run = run_packed(impl, qkv, cfg, convention, fn)
    assert_matches_reference(run.real, reference_result(qkv), FP32_TOL, "varlen")
    if convention == "padded":
        with pytest.raises(ValueError, match="verl convention"):
            run_packed(impl, qkv, cfg, convention, varlen_static)


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-STATIC-3")
def test_dense_fallback_traces_once_for_the_stream() -> None:
    """No host reads (dynamo traces it whole, fullgraph=True), and one graph for the CUDA-graph
    stream with static metadata; the bucket alone retraces as cu_seqlens changes length."""
    graphs = {}
    for static in (True, False):
        torch._dynamo.reset()
        counter = GraphCounter("eager")
        fn = torch.compile(dense_varlen_attention, backend=counter, fullgraph=True, dynamic=False)
        for lengths in GRAPH_STREAM:
            qkv = make_qkv(lengths, 1, 8, seed=1, device="cpu", dtype=torch.float32)
            cfg = _graph_config("last", static)
            q, _, plan = impl.pack_thd(qkv.q, cfg, 0)
            k, _, _ = impl.pack_thd(qkv.k, cfg, 0)
            v, _, _ = impl.pack_thd(qkv.v, cfg, 0)
            out = fn(q, k, v, attn_meta(plan, "padded", "cpu"))
            assert out.shape == q.shape
        graphs[static] = counter.graphs
    torch._dynamo.reset()
    assert graphs[True] == 1
    assert graphs[False] > 1


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-META-6")
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_graph_cycle_runs_eagerly_on_cpu(convention: str, tail: str) -> None:
    """The CUDA-graph test's cycle (static inputs from the first micro-batch, load, run, read
    back by the plan) with the eager runner: every micro-batch matches the fp32 reference."""
    qkvs = [
        make_qkv(x, HEADS, HEAD_DIM, seed=i, device="cpu", dtype=torch.float32)
        for i, x in enumerate(GRAPH_STREAM)
    ]
    results, runner = run_stream(
        impl,
        qkvs,
        _graph_config(tail, True),
        lambda inputs: EagerRunner(dense_varlen_attention, inputs),
        heads=HEADS,
        head_dim=HEAD_DIM,
        convention=convention,
        device="cpu",
    )
    assert isinstance(runner, EagerRunner) and runner.runs == len(GRAPH_STREAM)
    assert runner.inputs.meta.pad_between_seqs is declared_pad_between_seqs(convention)
    for qkv, got in zip(qkvs, results, strict=True):
        assert_matches_reference(got, reference_result(qkv), FP32_TOL, f"{convention}/{tail}")


def test_graph_cycle_refuses_another_graph_key() -> None:
    """Without static metadata the second micro-batch (other B) does not fit the static inputs."""
    qkvs = [make_qkv(x, 1, 8, seed=0, device="cpu", dtype=torch.float32) for x in GRAPH_STREAM]
    with pytest.raises(ValueError, match="cu_seqlens_len"):
        run_stream(
            impl,
            qkvs,
            _graph_config("last", False),
            lambda inputs: EagerRunner(dense_varlen_attention, inputs),
            heads=1,
            head_dim=8,
            convention="padded",
            device="cpu",
        )


def test_declared_pad_flag_reads_no_device_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flag a captured TE call gets is decided on the host: reading it compares no tensors."""
    plan = impl.plan_thd([3, 0, 5], impl.PackConfig(tp_size=2, **STATIC))
    meta = attn_meta(plan, "padded", "cpu")

    def boom(*args: Any) -> bool:
        raise AssertionError("torch.equal called")

    monkeypatch.setattr(torch, "equal", boom)
    assert replace(meta, declared_pad_between_seqs=True).pad_between_seqs is True
    with pytest.raises(AssertionError, match="torch.equal called"):
        _ = meta.pad_between_seqs


def test_run_device_lists_every_gpu_test_file() -> None:
    """run_device.sh names its test files (to run the new ones first): none may be left out."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = (root / "gpu_tests" / "run_device.sh").read_text()
    listed = {line.strip() for line in script.splitlines() if line.strip().endswith(".py")}
    present = {f"gpu_tests/{p.name}" for p in (root / "gpu_tests").glob("test_*.py")}
    assert present, "no GPU test files found"
    assert listed == present
