"""CPU checks that keep the GPU tests honest (run by `nox -s tests`, no GPU needed).

The GPU suite compares real kernels on impl's packed buffers against an fp32 per-sequence
reference. These tests show on the CPU that (1) the reference is right (it agrees with torch's own
SDPA on single sequences and is causal), (2) the torch fallback fed with impl's plan agrees with
it, in both cu_seqlens conventions, with and without the bucket, (3) a classic packing bug (padded
offsets ignored) makes the comparison fail, and (4) the recompile check's graph counting counts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import impl
from gpu_tests.cases import BF16_TOL, CONVENTIONS, FP32_TOL, all_batches, make_qkv
from gpu_tests.compile_check import PackedBlock, compile_stream, stream_batches
from gpu_tests.fallbacks import AttnMeta, sdpa_per_sequence, varlen_packed
from gpu_tests.fp32_reference import (
    assert_identical,
    assert_matches_reference,
    causal_attention_fp32,
    reference_result,
)
from gpu_tests.packed_run import pad_row_mask, run_packed

from .fake_varlen import fake_varlen_attn

HEADS, HEAD_DIM = 2, 16
CONFIGS: dict[str, dict[str, Any]] = {"tp1": {}, "tp2-fp8": {"tp_size": 2, "fp8": True}}
BUCKET = 256


def test_reference_equals_torch_sdpa_on_one_sequence() -> None:
    """The explicit reference agrees with torch's causal SDPA on a single unpacked sequence."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(37, HEADS, HEAD_DIM, generator=g) for _ in range(3))
    want = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True
    ).transpose(0, 1)
    torch.testing.assert_close(
        causal_attention_fp32(q, k, v), want, atol=FP32_TOL.atol, rtol=FP32_TOL.rtol
    )


def test_reference_is_causal_and_not_trivial() -> None:
    """Changing the last token changes only the last output row; the output is not the input."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(9, HEADS, HEAD_DIM, generator=g) for _ in range(3))
    base = causal_attention_fp32(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[-1] += 1.0
    v2[-1] -= 2.0
    moved = causal_attention_fp32(q, k2, v2)
    torch.testing.assert_close(moved[:-1], base[:-1], atol=0, rtol=0)
    assert not torch.allclose(moved[-1], base[-1])
    torch.testing.assert_close(base[0], v[0])  # the first token attends only itself
    assert not torch.allclose(base[1:], v[1:])


@pytest.mark.rules("R-META-2", "R-META-3", "R-META-4", "R-META-6", "R-ALIGN-4", "R-IN-2", "R-ROW-3")
@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("batch", ["zero-first-last", "mixed"])
def test_sdpa_fallback_on_impl_pack_matches_reference(
    batch: str, config: str, convention: str
) -> None:
    """fp32 on the CPU: the fallback on impl's pack equals the reference (outputs and q/k/v
    grads), pad rows of the output are zero where padding is excluded, pad-row grads are zero, and
    the bucket changes nothing on real tokens."""
    lengths = all_batches()[batch]
    qkv = make_qkv(lengths, HEADS, HEAD_DIM, seed=7, device="cpu", dtype=torch.float32)
    ref = reference_result(qkv)
    runs = []
    for bucket in (None, BUCKET):
        cfg = impl.PackConfig(**CONFIGS[config], bucket=bucket)
        run = run_packed(impl, qkv, cfg, convention, sdpa_per_sequence)
        assert_matches_reference(run.real, ref, FP32_TOL, f"{batch}/{config}/{bucket}")
        pad = pad_row_mask(run.plan, "cpu")
        if convention == "padded":
            assert (run.out[pad] == 0).all()
        for grad in (run.dq, run.dk, run.dv):
            assert (grad[pad] == 0).all()
        runs.append(run)
    assert runs[1].plan.total % BUCKET == 0
    assert_identical(runs[0].real, runs[1].real, f"{batch}/{config}")


def test_bf16_fallback_within_te_tolerance() -> None:
    """bf16 inputs through the fallback stay within TE's bf16 tolerance of the fp32 reference."""
    qkv = make_qkv(all_batches()["mixed"], HEADS, HEAD_DIM, seed=3, device="cpu")
    run = run_packed(impl, qkv, impl.PackConfig(tp_size=2), "padded", sdpa_per_sequence)
    assert_matches_reference(run.real, reference_result(qkv), BF16_TOL, "bf16")


def _ignore_padded_offsets(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
) -> torch.Tensor:
    """A classic packing bug: offsets taken from the real cu_seqlens instead of the padded ones."""
    bad = dataclasses.replace(
        meta, cu_seqlens_q_padded=meta.cu_seqlens_q, cu_seqlens_kv_padded=meta.cu_seqlens_kv
    )
    return sdpa_per_sequence(q, k, v, bad)


@pytest.mark.rules("R-META-6")
def test_wrong_offsets_are_caught() -> None:
    """The comparison is not vacuous: ignoring cu_seqlens_padded fails it."""
    qkv = make_qkv([3, 5, 0, 20], HEADS, HEAD_DIM, seed=4, device="cpu", dtype=torch.float32)
    run = run_packed(impl, qkv, impl.PackConfig(fp8=True), "padded", _ignore_padded_offsets)
    with pytest.raises(AssertionError):
        assert_matches_reference(run.real, reference_result(qkv), BF16_TOL, "bug")



@pytest.mark.parametrize("convention", CONVENTIONS)
def test_varlen_gather_scatter_path(convention: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The varlen fallback's gather/scatter around the kernel is right (kernel emulated on CPU)."""
    import torch.nn.attention.varlen as varlen_mod

    monkeypatch.setattr(varlen_mod, "varlen_attn", fake_varlen_attn)
    qkv = make_qkv([0, 17, 0, 40, 2], HEADS, HEAD_DIM, seed=5, device="cpu", dtype=torch.float32)
    run = run_packed(impl, qkv, impl.PackConfig(tp_size=4, bucket=64), convention, varlen_packed)
    assert_matches_reference(run.real, reference_result(qkv), FP32_TOL, "varlen")
    if convention == "padded":
        assert (run.out[pad_row_mask(run.plan, "cpu")] == 0).all()


@pytest.mark.rules("R-TOTAL-4")
def test_compile_counting_on_cpu() -> None:
    """The recompile check's counting: one graph per distinct total without the bucket, no more
    than the distinct bucketed totals with it (dynamo with the eager backend, CPU)."""
    torch.manual_seed(0)
    block = PackedBlock(hidden=32, heads=2)
    stream = stream_batches(seed=11, count=4, max_len=200)
    plain = compile_stream(impl, block, stream, impl.PackConfig(), backend="eager", device="cpu")
    bucketed = compile_stream(
        impl, block, stream, impl.PackConfig(bucket=512), backend="eager", device="cpu"
    )
    assert len(set(plain.totals)) > len(set(bucketed.totals))  # the stream exercises the bucket
    assert plain.graphs == len(set(plain.totals))
    assert 1 <= bucketed.graphs <= len(set(bucketed.totals))
