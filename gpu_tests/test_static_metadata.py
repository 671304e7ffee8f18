"""Real attention kernels on packs with static metadata: zero-length trailing entries
(``max_num_seqs``, R-STATIC-1) and ``max_seqlen = total`` (R-STATIC-2), against the fp32
per-sequence reference.

Per batch, pack config, tail convention, cu_seqlens convention and backend, q/k/v (bf16) are
packed twice with impl, once with static metadata and once without (same bucket and tail), run
forward and backward, and every real sequence's rows must be within TE's bf16 tolerance of the
fp32 reference; pad rows zero where the backend promises it. The two packs place every real row
at the same offset, so the static run must equal the exact one: bit for bit where the kernel gets
the same arguments for every real row (per-sequence SDPA), else within NEAR_TOL (BF16_TOL for the
dense fallback, whose bf16 sums run over max_seqlen slots); how often it was bit-identical anyway
is reported as ``static_bit_identical[...]``.

Backends: ``sdpa`` (per sequence), ``dense`` (the graph-safe torch fallback, dense
``[N, max_seqlen]`` + SDPA), ``varlen`` (torch flash varlen_attn: in the verl convention the whole
buffer with the zero-length entries and max_seqlen = T; in the padded convention the gathered real
rows, real cu_seqlens with the zero-length entries and max_seqlen = T), and TE
DotProductAttention (cuDNN fused forced, and TE's own choice).
"""

from __future__ import annotations

import contextlib
import zlib
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not importable")

import impl  # noqa: E402
from gpu_tests.cases import (  # noqa: E402
    BF16_TOL,
    CONVENTIONS,
    EDGE_BATCHES,
    Tol,
    make_qkv,
    random_lengths,
)
from gpu_tests.fallbacks import (  # noqa: E402
    AttnFn,
    sdpa_per_sequence,
    varlen_inflated,
    varlen_unavailable_reason,
)
from gpu_tests.fp32_reference import (  # noqa: E402
    FIELDS,
    as_fp32,
    assert_identical,
    assert_matches_reference,
    identical_fields,
    reference_result,
)
from gpu_tests.packed_run import pad_row_mask, run_packed  # noqa: E402
from gpu_tests.static_meta import dense_varlen_attention, varlen_static  # noqa: E402
from gpu_tests.te_attention import TEAttention, te_backend  # noqa: E402

HEADS, HEAD_DIM = 4, 64
BUCKET = 256
MAX_NUM_SEQS = 8  # >= every batch's B + 1 (the segment tail reserves one entry, R-ERR-13)
CONFIGS: dict[str, dict[str, Any]] = {"tp1": {}, "tp2-fp8": {"tp_size": 2, "fp8": True}}
TAILS = ("last", "segment")
BATCHES = {**EDGE_BATCHES, "random0": random_lengths(0)}
NEAR_TOL = Tol(atol=1e-2, rtol=1e-2)
BACKENDS = [
    "sdpa",
    "dense",
    "varlen",
    pytest.param("te-fused", marks=pytest.mark.te),
    pytest.param("te-auto", marks=pytest.mark.te),
]


def _attention(backend: str, convention: str) -> tuple[AttnFn, Any]:
    """(attention callable, context to run it in)."""
    if backend == "sdpa":
        return sdpa_per_sequence, contextlib.nullcontext()
    if backend == "dense":
        return dense_varlen_attention, contextlib.nullcontext()
    if backend == "varlen":
        reason = varlen_unavailable_reason()
        if reason:
            pytest.skip(reason)
        return (varlen_static if convention == "verl" else varlen_inflated), (
            contextlib.nullcontext()
        )
    ctx = contextlib.ExitStack()
    ctx.enter_context(te_backend(backend.removeprefix("te-")))
    try:
        return TEAttention(HEADS, HEAD_DIM), ctx
    except BaseException:
        ctx.close()
        raise


def _zero_pad_output_promised(backend: str, convention: str) -> bool:
    return convention == "padded" and backend in ("sdpa", "dense", "varlen", "te-fused")


@pytest.mark.rules(
    "R-STATIC-1", "R-STATIC-2", "R-TAIL-1", "R-TOTAL-5", "R-META-6", "R-META-7", "R-MEG-1"
)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("batch", list(BATCHES))
def test_static_metadata_attention_matches_fp32_reference(
    batch: str, config: str, tail: str, convention: str, backend: str, gpu_report: dict[str, Any]
) -> None:
    """Zero-length trailing entries and max_seqlen = T: outputs and q/k/v grads equal the fp32
    reference, pad rows zero where promised, and the static pack's results equal the exact one's."""
    lengths = BATCHES[batch]
    qkv = make_qkv(lengths, HEADS, HEAD_DIM, seed=zlib.crc32(batch.encode()), device="cuda")
    ref = reference_result(qkv)
    attn, ctx = _attention(backend, convention)
    static: dict[str, Any] = {"max_num_seqs": MAX_NUM_SEQS, "max_seqlen": "total"}
    runs = {}
    with ctx:
        for kind, extra in (("exact", {}), ("static", static)):
            cfg = impl.PackConfig(**CONFIGS[config], bucket=BUCKET, tail=tail, **extra)
            what = f"{backend}/{convention}/{config}/{tail}/{kind}/{batch}={lengths}"
            run = run_packed(impl, qkv, cfg, convention, attn)
            assert_matches_reference(run.real, ref, BF16_TOL, what)
            if _zero_pad_output_promised(backend, convention):
                assert (run.out[pad_row_mask(run.plan, "cuda")] == 0).all(), f"{what}: pad rows"
            runs[kind] = run
    plan = runs["static"].plan
    assert len(plan.cu_seqlens) == MAX_NUM_SEQS + 1 and plan.num_seqs == len(lengths)
    assert int(plan.max_seqlen) == int(plan.total) == int(runs["exact"].plan.total)
    what = f"{backend}/{convention}/{config}/{tail}/{batch}: static vs exact"
    same = identical_fields(runs["static"].real, runs["exact"].real)
    tally = gpu_report.setdefault(f"static_bit_identical[{backend}/{convention}]", {})
    tally["cases"] = tally.get("cases", 0) + 1
    for name in FIELDS:
        tally[name] = tally.get(name, 0) + (name in same)
    if backend == "sdpa":
        assert_identical(runs["static"].real, runs["exact"].real, what)
    else:
        # dense: its bf16 SDPA runs over max_seqlen slots (T vs max P), so its sums differ in
        # length; each run is already held to BF16_TOL of the fp32 reference above.
        tol = BF16_TOL if backend == "dense" else NEAR_TOL
        assert_matches_reference(runs["static"].real, as_fp32(runs["exact"].real), tol, what)
