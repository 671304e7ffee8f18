"""One CUDA-graph capture of packed attention (forward + backward), replayed over micro-batches of
different B within one bucket, with ``max_num_seqs`` and ``max_seqlen="total"``.

Each micro-batch is packed with impl and copied into the graph's static inputs (rows,
cu_seqlens, cu_seqlens_padded; ``cuda_graph.py`` says why packing itself stays outside the
graph). Every replay's real rows (output, dq, dk, dv) must be within TE's bf16 tolerance of the
fp32 per-sequence reference, and within NEAR_TOL of the same attention run eagerly on the same
packs; one capture, one replay per micro-batch.

Negative control: a graph captured with an exact ``max_seqlen`` from a micro-batch of short
sequences, replayed on one with a longer sequence (same B, same bucket, so the copy succeeds),
gives wrong rows (dense fallback). That is the failure a static upper bound prevents.
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
    GRAPH_BUCKET,
    GRAPH_MAX_NUM_SEQS,
    GRAPH_STREAM,
    GRAPH_TP,
    Tol,
    make_qkv,
)
from gpu_tests.cuda_graph import (  # noqa: E402
    CapturedRunner,
    EagerRunner,
    StaticInputs,
    pack_qkv,
    run_stream,
)
from gpu_tests.fallbacks import AttnFn, varlen_unavailable_reason  # noqa: E402
from gpu_tests.fp32_reference import (  # noqa: E402
    FIELDS,
    as_fp32,
    assert_matches_reference,
    identical_fields,
    reference_result,
)
from gpu_tests.static_meta import dense_varlen_attention, graph_key, varlen_static  # noqa: E402
from gpu_tests.te_attention import TEAttention, te_backend, te_version  # noqa: E402

HEADS, HEAD_DIM = 4, 64
STREAM = [list(x) for x in GRAPH_STREAM]
NEAR_TOL = Tol(atol=1e-2, rtol=1e-2)
CASES = [
    ("dense", "padded"),
    ("dense", "verl"),
    ("varlen", "verl"),
    pytest.param("te-fused", "padded", marks=pytest.mark.te),
    pytest.param("te-fused", "verl", marks=pytest.mark.te),
]
TE_GRAPH_SAFE = (2, 18)  # TE #2898: THD under CUDA graphs (sync-free pad_between_seqs, zero-fill)


def _attention(backend: str) -> AttnFn:
    """The attention callable; for TE, call inside ``_backend_ctx`` (TE reads NVTE_* at init)."""
    if backend == "dense":
        return dense_varlen_attention
    if backend == "varlen":
        reason = varlen_unavailable_reason()
        if reason:
            pytest.skip(reason)
        return varlen_static
    version = te_version()
    try:
        major_minor = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        major_minor = (0, 0)
    if major_minor < TE_GRAPH_SAFE:
        pytest.skip(f"TE {version} < 2.18: its THD path is not capture-safe before TE #2898")
    return TEAttention(HEADS, HEAD_DIM)


def _backend_ctx(backend: str) -> Any:
    if backend.startswith("te-"):
        return te_backend(backend.removeprefix("te-"))
    return contextlib.nullcontext()


def _qkvs(stream: list[list[int]]) -> list[Any]:
    return [
        make_qkv(lengths, HEADS, HEAD_DIM, seed=zlib.crc32(repr(lengths).encode()), device="cuda")
        for lengths in stream
    ]


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-STATIC-3", "R-TOTAL-4", "R-META-6")
@pytest.mark.parametrize("tail", ["last", "segment"])
@pytest.mark.parametrize("backend,convention", CASES)
def test_one_capture_replays_every_micro_batch(
    backend: str, convention: str, tail: str, gpu_report: dict[str, Any]
) -> None:
    """Captured once, replayed per micro-batch (B = 1..7): every replay matches the fp32 reference
    and the eager run of the same attention."""
    cfg = impl.PackConfig(
        tp_size=GRAPH_TP,
        bucket=GRAPH_BUCKET,
        tail=tail,
        max_num_seqs=GRAPH_MAX_NUM_SEQS,
        max_seqlen="total",
    )
    keys = {graph_key(impl.plan_thd(lengths, cfg)) for lengths in STREAM}
    assert len(keys) == 1, f"the stream leaves one bucket or one graph key: {keys}"
    qkvs = _qkvs(STREAM)
    kw: dict[str, Any] = {
        "heads": HEADS,
        "head_dim": HEAD_DIM,
        "convention": convention,
        "device": "cuda",
    }
    with _backend_ctx(backend):
        attn = _attention(backend)
        replayed, runner = run_stream(impl, qkvs, cfg, lambda i: CapturedRunner(attn, i), **kw)
        eager, _ = run_stream(impl, qkvs, cfg, lambda i: EagerRunner(attn, i), **kw)
    assert isinstance(runner, CapturedRunner) and runner.replays == len(STREAM)
    identical = 0
    for lengths, qkv, got, want in zip(STREAM, qkvs, replayed, eager, strict=True):
        what = f"{backend}/{convention}/{tail}/{lengths}"
        assert_matches_reference(got, reference_result(qkv), BF16_TOL, f"{what}: graph vs fp32")
        assert_matches_reference(got, as_fp32(want), NEAR_TOL, f"{what}: graph vs eager")
        identical += len(identical_fields(got, want)) == len(FIELDS)
    gpu_report.setdefault("cuda_graph_replays", {})[f"{backend}/{convention}/{tail}"] = {
        "captures": 1,
        "replays": runner.replays,
        "bit_identical_to_eager": identical,
        "batch_sizes": [len(x) for x in STREAM],
        "graph_key": list(next(iter(keys))),
    }


@pytest.mark.rules("R-STATIC-2", "R-META-4")
def test_graph_with_captured_exact_max_seqlen_is_wrong() -> None:
    """Negative control: max_seqlen="exact" baked into a capture from short sequences gives wrong
    rows for a later micro-batch with a longer one (same total and entry count, so it loads).

    Run on the dense fallback only, whose indices are clamped: a kernel told a max_seqlen below a
    real length is outside its contract, and a fault there would end the whole run's CUDA context.
    """
    cfg = impl.PackConfig(max_num_seqs=4)  # max_seqlen="exact"; 300 rows either way
    short, long = [100, 100, 100], [290, 10]
    p_short, p_long = (pack_qkv(impl, x, cfg, "cuda") for x in _qkvs([short, long]))
    assert graph_key(p_short.plan)._replace(max_seqlen=0) == graph_key(p_long.plan)._replace(
        max_seqlen=0
    )
    assert (p_short.plan.max_seqlen, p_long.plan.max_seqlen) == (100, 290)
    attn = _attention("dense")
    inputs = StaticInputs(
        graph_key(p_short.plan),
        HEADS,
        HEAD_DIM,
        convention="verl",
        dtype=torch.bfloat16,
        device="cuda",
    )
    inputs.load(p_short.plan, p_short.q, p_short.k, p_short.v, p_short.dout)
    runner = CapturedRunner(attn, inputs)
    inputs.key = graph_key(p_long.plan)  # let the longer micro-batch in; the graph keeps 100
    inputs.load(p_long.plan, p_long.q, p_long.k, p_long.v, p_long.dout)
    got = runner.run().real(p_long.plan)
    qkv_long = _qkvs([long])[0]
    with pytest.raises(AssertionError):
        assert_matches_reference(got, reference_result(qkv_long), BF16_TOL, "stale max_seqlen")
