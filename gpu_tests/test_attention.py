"""Real attention kernels on impl's packed THD buffers, against an fp32 per-sequence reference.

For every batch (zero-length sequences included), pack config and cu_seqlens convention, q/k/v
(bf16) are packed with impl, run through the kernel forward and backward, and each sequence's real
rows (read from the plan, R-META-6) are compared with fp32 causal attention on the unpacked
sequence, within TE's bf16 tolerance. Each case runs with the bucket off and on; real-token outputs
and gradients must be bit-identical where the kernel sees identical arguments for every real row,
and within NEAR_TOL elsewhere (how many were bit-identical anyway is reported).

Backends: TE DotProductAttention (fused forced, and TE's own choice), and two torch-only fallbacks
that run on any CUDA box: varlen_attn (flash) and per-sequence SDPA.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not importable")

import impl  # noqa: E402
from gpu_tests.cases import BF16_TOL, CONVENTIONS, Tol, all_batches, make_qkv  # noqa: E402
from gpu_tests.fallbacks import AttnFn, sdpa_per_sequence, varlen_packed, varlen_unavailable_reason  # noqa: E402
from gpu_tests.fp32_reference import (  # noqa: E402
    FIELDS,
    as_fp32,
    assert_identical,
    assert_matches_reference,
    identical_fields,
    reference_result,
)
from gpu_tests.packed_run import pad_row_mask, run_packed  # noqa: E402
from gpu_tests.te_attention import TEAttention, te_backend  # noqa: E402

HEADS, HEAD_DIM = 4, 64
BUCKET = 256
CONFIGS: dict[str, dict[str, Any]] = {"tp1": {}, "tp2-fp8": {"tp_size": 2, "fp8": True}}
BATCHES = all_batches()
# Bucket on vs off where bit-identity is not guaranteed: well inside the reference tolerance.
NEAR_TOL = Tol(atol=1e-2, rtol=1e-2)

BACKENDS = [
    "sdpa",
    "varlen",
    pytest.param("te-fused", marks=pytest.mark.te),
    pytest.param("te-auto", marks=pytest.mark.te),
]


def _zero_pad_output_promised(backend: str, convention: str) -> bool:
    """Where pad rows of the output must be zero: padding excluded (real cu_seqlens), and a
    backend that promises it (our fallbacks by construction; TE's cuDNN fused backend). TE's own
    choice may be FlashAttention-3, which leaves garbage there (domain facts §1)."""
    return convention == "padded" and backend in ("sdpa", "varlen", "te-fused")


@contextlib.contextmanager
def _deterministic() -> Iterator[None]:
    """Deterministic torch kernels (flash backward without atomics), so that bucket on/off can
    be bit-compared on gradients too."""
    old = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old, warn_only=old_warn)


def _attention(backend: str) -> tuple[AttnFn, Any]:
    """(attention callable, context to run it in) for a backend name.

    The torch fallbacks run deterministically (flash backward without atomics). TE runs with its
    own backend choice untouched: asking it for determinism can make it drop its fused backend.
    """
    if backend == "sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        # Flash with math as the fallback; not mem-efficient, whose backward is non-deterministic.
        ctx = contextlib.ExitStack()
        ctx.enter_context(sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]))
        ctx.enter_context(_deterministic())
        return sdpa_per_sequence, ctx
    if backend == "varlen":
        reason = varlen_unavailable_reason()
        if reason:
            pytest.skip(reason)
        return varlen_packed, _deterministic()
    # Enter the backend switch before building the module: older TE reads NVTE_* at __init__.
    ctx = contextlib.ExitStack()
    ctx.enter_context(te_backend(backend.removeprefix("te-")))
    try:
        return TEAttention(HEADS, HEAD_DIM), ctx
    except BaseException:
        ctx.close()
        raise


def _bit_identity_guaranteed(backend: str, convention: str) -> bool:
    """Where bucket on/off MUST be bit-identical on real tokens: the kernel then gets exactly the
    same arguments for every real row (the fallbacks with padding excluded attend the same dense
    rows with the same lengths). Elsewhere the bucket lengthens the last sequence or changes
    max_seqlen, which a kernel may legitimately use to pick a different split or tile, so the
    two runs are held to NEAR_TOL and whether they were bit-identical is reported."""
    return convention == "padded" and backend in ("sdpa", "varlen")


@pytest.mark.rules(
    "R-META-2",
    "R-META-3",
    "R-META-4",
    "R-META-6",
    "R-ALIGN-4",
    "R-IN-2",
    "R-ROW-2",
    "R-ROW-3",
    "R-TOTAL-5",
    "R-MEG-1",
)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("batch", list(BATCHES))
def test_packed_attention_matches_fp32_reference(
    batch: str, config: str, convention: str, backend: str, gpu_report: dict[str, Any]
) -> None:
    """Kernel on the packed buffer == fp32 per-sequence causal attention (outputs, dq, dk, dv);
    pad rows zero where promised; bucket on and off identical on real tokens (bit for bit where
    the kernel's arguments are the same, else within NEAR_TOL, with bit-identity reported)."""
    lengths = BATCHES[batch]
    qkv = make_qkv(lengths, HEADS, HEAD_DIM, seed=zlib.crc32(batch.encode()), device="cuda")
    ref = reference_result(qkv)
    attn, ctx = _attention(backend)
    runs = []
    with ctx:
        for bucket in (None, BUCKET):
            cfg = impl.PackConfig(**CONFIGS[config], bucket=bucket)
            what = f"{backend}/{convention}/{config}/bucket={bucket}/{batch}={lengths}"
            run = run_packed(impl, qkv, cfg, convention, attn)
            assert_matches_reference(run.real, ref, BF16_TOL, what)
            if _zero_pad_output_promised(backend, convention):
                pad = pad_row_mask(run.plan, "cuda")
                assert (run.out[pad] == 0).all(), f"{what}: nonzero output on pad rows"
            runs.append(run)
    assert int(runs[1].plan.total) % BUCKET == 0
    what = f"{backend}/{convention}/{config}/{batch}: bucket on vs off"
    same = identical_fields(runs[0].real, runs[1].real)
    tally = gpu_report.setdefault(f"bucket_bit_identical[{backend}/{convention}]", {})
    tally["cases"] = tally.get("cases", 0) + 1
    for name in FIELDS:
        tally[name] = tally.get(name, 0) + (name in same)
    if _bit_identity_guaranteed(backend, convention):
        assert_identical(runs[0].real, runs[1].real, what)
    else:
        assert_matches_reference(runs[1].real, as_fp32(runs[0].real), NEAR_TOL, what)


@pytest.mark.te
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_te_agrees_with_torch_fallback(convention: str) -> None:
    """TE and the torch fallback agree with each other on the same pack (catches a shared
    misreading of the metadata that a looser reference comparison could hide)."""
    qkv = make_qkv(BATCHES["mixed"], HEADS, HEAD_DIM, seed=5, device="cuda")
    cfg = impl.PackConfig(tp_size=2, fp8=True, bucket=BUCKET)
    with te_backend("auto"):
        te_attn = TEAttention(HEADS, HEAD_DIM)
        te_run = run_packed(impl, qkv, cfg, convention, te_attn)
    fb_run = run_packed(impl, qkv, cfg, convention, sdpa_per_sequence)
    what = f"te vs sdpa/{convention}"
    assert_matches_reference(te_run.real, as_fp32(fb_run.real), BF16_TOL, what)
