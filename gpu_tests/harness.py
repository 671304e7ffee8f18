"""Shared pieces of the GPU tests: batches, packed-attention backends and fp32 references.

Everything here is device-independent on purpose. ``tests/gpu_harness`` runs the same functions on
the CPU (in ``nox -s tests``) to show that the fp32 reference and the torch fallback agree, and that
a wrong offset is caught, so a green GPU run is not vacuous.

Spec rules used to read a packed buffer: R-META-2/3 (cu_seqlens, cu_seqlens_padded), R-META-4
(max_seqlen), R-META-6 with R-SHARD-1 (sequence ``i`` occupies ``[cu_padded[i], cu_padded[i+1])``,
its real tokens first, R-ALIGN-4).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F


# --------------------------------------------------------------------------------------------
# Tolerances: TransformerEngine's own attention tests use atol = rtol = 2.5e-2 for bf16.
class Tol(NamedTuple):
    """Absolute and relative tolerance for torch.testing.assert_close."""

    atol: float
    rtol: float


BF16_TOL = Tol(atol=2.5e-2, rtol=2.5e-2)
# fp32 against fp32 (the CPU harness, the compiled block): only summation order differs.
FP32_TOL = Tol(atol=1e-4, rtol=1e-4)

CONVENTIONS = ("padded", "verl")
"""``padded``: real ``cu_seqlens`` plus the plan's ``cu_seqlens_padded`` (TE's THD convention,
padding excluded). ``verl``: ``cu_seqlens = cu_seqlens_padded`` (Megatron/verl, R-MEG-1: padding
counts as part of its causal sequence, harmless for real tokens because it is a suffix)."""

# Batches: fixed edge cases (R-IN-2: zero-length first, last, in the middle) plus seeded random
# ones. Every batch has at least one real token so that the attention is not empty.
EDGE_BATCHES: dict[str, list[int]] = {
    "zero-first-last": [0, 45, 0],
    "single-token": [1],
    "mixed": [130, 0, 3, 64, 0, 1],
}
RANDOM_SEEDS = (0, 1, 2)


def random_lengths(seed: int, *, max_len: int = 192, max_batch: int = 6) -> list[int]:
    """Seeded random lengths, about a quarter of them zero (R-IN-2)."""
    g = torch.Generator().manual_seed(1000 + seed)
    b = int(torch.randint(1, max_batch + 1, (1,), generator=g))
    lengths = []
    for _ in range(b):
        if float(torch.rand((), generator=g)) < 0.25:
            lengths.append(0)
        else:
            lengths.append(int(torch.randint(1, max_len + 1, (1,), generator=g)))
    if not any(lengths):
        lengths[0] = 1 + seed
    return lengths


def all_batches() -> dict[str, list[int]]:
    """Every batch the attention tests run, by id."""
    out = dict(EDGE_BATCHES)
    for s in RANDOM_SEEDS:
        out[f"random{s}"] = random_lengths(s)
    return out


# --------------------------------------------------------------------------------------------
@dataclass
class QKV:
    """Per-sequence query/key/value and output-gradient tensors, each ``[L_i, H, D]``."""

    q: list[torch.Tensor]
    k: list[torch.Tensor]
    v: list[torch.Tensor]
    dout: list[torch.Tensor]


def make_qkv(
    lengths: Sequence[int],
    heads: int,
    head_dim: int,
    *,
    seed: int,
    device: torch.device | str,
    dtype: torch.dtype = torch.bfloat16,
) -> QKV:
    """Seeded random q/k/v/dout per sequence (generated on the CPU, so identical on any device)."""
    g = torch.Generator().manual_seed(seed)

    def one(n: int) -> torch.Tensor:
        return torch.randn(n, heads, head_dim, generator=g).to(device=device, dtype=dtype)

    return QKV(
        q=[one(n) for n in lengths],
        k=[one(n) for n in lengths],
        v=[one(n) for n in lengths],
        dout=[one(n) for n in lengths],
    )


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """fp32 matmuls in full precision (no TF32) while the reference runs."""
    old_mm = torch.backends.cuda.matmul.allow_tf32
    old_cudnn = torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_mm
        torch.backends.cudnn.allow_tf32 = old_cudnn


def causal_attention_fp32(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """The independent reference: softmax(q k^T * scale + causal mask) v for ONE sequence, in fp32.

    Written out with einsum and an explicit lower-triangular mask: no fused kernel, no packing, no
    cu_seqlens. Inputs ``[L, H, D]`` of any float dtype; output ``[L, H, D]`` fp32.
    """
    q32, k32, v32 = q.float(), k.float(), v.float()
    n, _, d = q32.shape
    s = 1.0 / math.sqrt(d) if scale is None else scale
    scores = torch.einsum("qhd,khd->hqk", q32, k32) * s
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v32)


@dataclass
class Result:
    """Per-sequence outputs and q/k/v gradients (real tokens only)."""

    out: list[torch.Tensor]
    dq: list[torch.Tensor]
    dk: list[torch.Tensor]
    dv: list[torch.Tensor]


FIELDS = ("out", "dq", "dk", "dv")


def as_fp32(res: Result) -> Result:
    """A copy of ``res`` in fp32 (to use one run as the reference of another)."""
    return Result(*([t.float() for t in getattr(res, name)] for name in FIELDS))


def reference_result(qkv: QKV) -> Result:
    """fp32 per-sequence causal attention and its autograd gradients, sequence by sequence."""
    res = Result([], [], [], [])
    with exact_fp32():
        for q, k, v, do in zip(qkv.q, qkv.k, qkv.v, qkv.dout, strict=True):
            q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
            out = causal_attention_fp32(q32, k32, v32)
            out.backward(do.float())
            assert q32.grad is not None and k32.grad is not None and v32.grad is not None
            res.out.append(out.detach())
            res.dq.append(q32.grad)
            res.dk.append(k32.grad)
            res.dv.append(v32.grad)
    return res


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttnMeta:
    """What an attention kernel is told about a packed THD buffer (int32 tensors on the device)."""

    cu_seqlens_q: torch.Tensor
    cu_seqlens_kv: torch.Tensor
    cu_seqlens_q_padded: torch.Tensor
    cu_seqlens_kv_padded: torch.Tensor
    max_seqlen_q: int
    max_seqlen_kv: int
    convention: str

    @property
    def pad_between_seqs(self) -> bool:
        """Whether any padding rows sit outside the real boundaries."""
        return not torch.equal(self.cu_seqlens_q, self.cu_seqlens_q_padded)


def _i32(x: Any, device: torch.device | str) -> torch.Tensor:
    return torch.as_tensor(x).to(device=device, dtype=torch.int32)


def attn_meta(plan: Any, convention: str, device: torch.device | str) -> AttnMeta:
    """Kernel metadata from a plan (R-META-2..4), in one of the two CONVENTIONS."""
    padded = _i32(plan.cu_seqlens_padded, device)
    if convention == "padded":
        real = _i32(plan.cu_seqlens, device)
    elif convention == "verl":
        real = padded
    else:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    max_seqlen = int(plan.max_seqlen)
    return AttnMeta(real, real, padded, padded, max_seqlen, max_seqlen, convention)


def _segments(meta: AttnMeta) -> list[tuple[int, int]]:
    """(start row, attended rows) per sequence: starts from cu_seqlens_padded, counts from
    cu_seqlens."""
    starts = meta.cu_seqlens_q_padded.tolist()
    real = meta.cu_seqlens_q.tolist()
    segs = []
    for i in range(len(starts) - 1):
        n = real[i + 1] - real[i]
        if n < 0 or starts[i] + n > starts[i + 1]:
            raise ValueError(
                f"sequence {i}: {n} rows do not fit its padded slot {starts[i : i + 2]}"
            )
        segs.append((starts[i], n))
    return segs


def _scatter_rows(
    like: torch.Tensor, segs: Sequence[tuple[int, int]], pieces: list[torch.Tensor]
) -> torch.Tensor:
    """Zeros shaped like ``like`` with ``pieces`` written at the segments (differentiable)."""
    out = like.new_zeros(like.shape)
    idx = [torch.arange(s, s + n, device=like.device) for s, n in segs if n > 0]
    if not idx:
        return out
    return out.index_copy(0, torch.cat(idx), torch.cat(pieces))


def sdpa_per_sequence(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
) -> torch.Tensor:
    """Torch fallback: causal SDPA on each sequence's rows; rows outside them are zero.

    Honours both arrays like TE's THD path: sequence ``i`` starts at ``cu_seqlens_padded[i]`` and
    attends its first ``cu_seqlens[i+1] - cu_seqlens[i]`` rows. Works on any device and dtype.
    """
    segs = _segments(meta)
    pieces = []
    for s, n in segs:
        if n == 0:
            continue
        qi, ki, vi = (t[s : s + n].transpose(0, 1) for t in (q, k, v))
        pieces.append(F.scaled_dot_product_attention(qi, ki, vi, is_causal=True).transpose(0, 1))
    return _scatter_rows(q, segs, pieces)


def varlen_unavailable_reason() -> str | None:
    """None when ``torch.nn.attention.varlen.varlen_attn`` can run here, else why not."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn ({e})"
    if not torch.cuda.is_available():
        return "varlen_attn needs CUDA"
    return None


def _varlen_causal_kwargs() -> dict[str, Any]:
    """Causal flag for varlen_attn across torch versions (is_causal=True, or window (-1, 0))."""
    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    kwargs: dict[str, Any] = {}
    if "is_causal" in params:
        kwargs["is_causal"] = True
    elif "window_size" in params:
        kwargs["window_size"] = (-1, 0)
    else:
        raise RuntimeError("varlen_attn has neither is_causal nor window_size")
    if "num_splits" in params:
        kwargs["num_splits"] = 1  # batch invariance: a sequence's result ignores its neighbours
    return kwargs


def varlen_packed(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
) -> torch.Tensor:
    """Torch fallback on real GPU varlen attention (flash) over the packed buffer.

    varlen_attn has no padded-offset argument: with padding between sequences, the real rows are
    gathered into a dense buffer, attended with the real cu_seqlens and scattered back (pad rows
    zero, as TE's fused backend does). In the verl convention the buffer goes in unchanged.
    """
    from torch.nn.attention.varlen import varlen_attn

    kwargs = _varlen_causal_kwargs()
    if not meta.pad_between_seqs:
        cu = meta.cu_seqlens_q
        out = varlen_attn(q, k, v, cu, cu, meta.max_seqlen_q, meta.max_seqlen_kv, **kwargs)
        assert isinstance(out, torch.Tensor)
        return out
    segs = _segments(meta)
    idx = torch.cat([torch.arange(s, s + n, device=q.device) for s, n in segs])
    qc, kc, vc = (t.index_select(0, idx) for t in (q, k, v))
    cu = meta.cu_seqlens_q
    # The dense buffer's own longest sequence (not the padded max_seqlen): the kernel then gets
    # the same arguments whatever the padding, so bucket on/off is bit-identical by construction.
    longest = max(n for _, n in segs)
    oc = varlen_attn(qc, kc, vc, cu, cu, longest, longest, **kwargs)
    assert isinstance(oc, torch.Tensor)
    return q.new_zeros(q.shape).index_copy(0, idx, oc)


# --------------------------------------------------------------------------------------------
# TransformerEngine (imported lazily and defensively: every API is feature-detected).
def import_te() -> tuple[Any, str | None]:
    """(transformer_engine.pytorch, None), or (None, why it cannot be used)."""
    try:
        import transformer_engine.pytorch as te
    except Exception as e:  # ImportError, or a broken CUDA extension raising OSError/RuntimeError
        return None, f"transformer_engine.pytorch is not importable: {type(e).__name__}: {e}"
    return te, None


def te_version() -> str:
    """TE's version string, or 'absent'."""
    try:
        import transformer_engine as te_root
    except Exception:
        return "absent"
    return str(getattr(te_root, "__version__", "unknown"))


_TE_BACKEND_CACHE_MODULES = (
    "transformer_engine.pytorch.attention.dot_product_attention.dot_product_attention",
    "transformer_engine.pytorch.attention.dot_product_attention.utils",
    "transformer_engine.pytorch.attention",
    "transformer_engine.pytorch.dot_product_attention",
)

TE_FORCE_ENV = {
    # Only cuDNN fused attention: the backend that supports padding between THD sequences and
    # promises zero output on pad rows (domain facts §1).
    "fused": {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"},
    "auto": {},
}


def te_reset_backend_cache() -> None:
    """Make TE re-select its attention backend (it caches the choice per attention params, and
    the NVTE_* switches are not part of the cache key)."""
    for name in _TE_BACKEND_CACHE_MODULES:
        cache = getattr(sys.modules.get(name), "_attention_backends", None)
        if isinstance(cache, dict):
            if "attention_params" in cache:
                cache["attention_params"] = None
            if "backend_selection_requires_update" in cache:
                cache["backend_selection_requires_update"] = True


@contextlib.contextmanager
def te_backend(mode: str) -> Iterator[None]:
    """Force TE's attention backend for the duration (``fused`` or ``auto``)."""
    env = TE_FORCE_ENV[mode]
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    te_reset_backend_cache()
    try:
        yield
    finally:
        for k, val in old.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val
        te_reset_backend_cache()


class TEAttention:
    """TE ``DotProductAttention(qkv_format="thd", attn_mask_type="padding_causal")`` on a packed
    buffer, called with the plan's metadata in either convention."""

    def __init__(self, heads: int, head_dim: int, **te_kwargs: Any) -> None:
        te, why = import_te()
        if te is None:
            raise RuntimeError(why)
        self.module = te.DotProductAttention(
            heads,
            head_dim,
            attention_dropout=0.0,
            qkv_format="thd",
            attn_mask_type="padding_causal",
            **te_kwargs,
        )
        if torch.cuda.is_available():
            self.module = self.module.cuda()
        self.forward_params = set(inspect.signature(self.module.forward).parameters)

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
    ) -> torch.Tensor:
        kwargs: dict[str, Any] = {
            "cu_seqlens_q": meta.cu_seqlens_q,
            "cu_seqlens_kv": meta.cu_seqlens_kv,
            "cu_seqlens_q_padded": meta.cu_seqlens_q_padded,
            "cu_seqlens_kv_padded": meta.cu_seqlens_kv_padded,
            "max_seqlen_q": meta.max_seqlen_q,
            "max_seqlen_kv": meta.max_seqlen_kv,
        }
        if "pad_between_seqs" in self.forward_params:
            # Explicit since TE 2.2; older auto-detection missed tail padding (domain facts §1).
            kwargs["pad_between_seqs"] = meta.pad_between_seqs
        out = self.module(q, k, v, **kwargs)
        return out.view(q.shape)  # TE returns [T, H * D] for thd


# --------------------------------------------------------------------------------------------
AttnFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttnMeta], torch.Tensor]


def real_rows(packed: torch.Tensor, plan: Any) -> list[torch.Tensor]:
    """Each sequence's real rows of a cp=1 buffer, read straight from the plan (R-META-6)."""
    start = torch.as_tensor(plan.cu_seqlens_padded).tolist()
    lens = torch.as_tensor(plan.seqlens).tolist()
    return [packed[s : s + n] for s, n in zip(start, lens, strict=False)]


def pad_row_mask(plan: Any, device: torch.device | str) -> torch.Tensor:
    """Bool ``[total]``: True on padding rows of a cp=1 buffer (R-ALIGN-4, R-TOTAL-5)."""
    mask = torch.ones(int(plan.total), dtype=torch.bool)
    for s, n in zip(
        torch.as_tensor(plan.cu_seqlens_padded).tolist(),
        torch.as_tensor(plan.seqlens).tolist(),
        strict=False,
    ):
        mask[s : s + n] = False
    return mask.to(device)


@dataclass
class PackedRun:
    """One packed forward/backward: the plan, packed output/grads, and per-sequence real rows."""

    plan: Any
    meta: AttnMeta
    out: torch.Tensor
    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    real: Result


def run_packed(impl_mod: Any, qkv: QKV, config: Any, convention: str, attn: AttnFn) -> PackedRun:
    """Pack q/k/v/dout with impl (cp=1), run ``attn`` forward and backward, read real rows back."""
    q, _, plan = impl_mod.pack_thd(qkv.q, config, 0)
    k, _, plan_k = impl_mod.pack_thd(qkv.k, config, 0)
    v, _, _ = impl_mod.pack_thd(qkv.v, config, 0)
    dout, _, _ = impl_mod.pack_thd(qkv.dout, config, 0)  # pad rows get 0 (R-ROW-2)
    assert int(plan.total) == q.shape[0] == k.shape[0], "pack_thd rows disagree with plan.total"
    assert torch.equal(
        torch.as_tensor(plan.cu_seqlens_padded), torch.as_tensor(plan_k.cu_seqlens_padded)
    )
    device = qkv.q[0].device if qkv.q else q.device
    q, k, v, dout = (t.to(device) for t in (q, k, v, dout))
    meta = attn_meta(plan, convention, device)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attn(q, k, v, meta)
    out.backward(dout)
    assert q.grad is not None and k.grad is not None and v.grad is not None
    out = out.detach()
    real = Result(
        out=real_rows(out, plan),
        dq=real_rows(q.grad, plan),
        dk=real_rows(k.grad, plan),
        dv=real_rows(v.grad, plan),
    )
    return PackedRun(plan, meta, out, q.grad, k.grad, v.grad, real)


def assert_matches_reference(got: Result, ref: Result, tol: Tol, what: str) -> None:
    """Every sequence's output and q/k/v gradients agree with the fp32 reference within ``tol``."""
    for name in FIELDS:
        for i, (g, r) in enumerate(zip(getattr(got, name), getattr(ref, name), strict=True)):
            try:
                torch.testing.assert_close(g.float(), r, atol=tol.atol, rtol=tol.rtol)
            except AssertionError as e:
                raise AssertionError(f"{what}: {name} of sequence {i}: {e}") from None


def identical_fields(a: Result, b: Result) -> list[str]:
    """The fields whose real-token values are bit-identical in ``a`` and ``b``."""
    return [
        name
        for name in FIELDS
        if all(torch.equal(x, y) for x, y in zip(getattr(a, name), getattr(b, name), strict=True))
    ]


def assert_identical(a: Result, b: Result, what: str, fields: Sequence[str] = FIELDS) -> None:
    """Bit-identical real-token results (bucket on vs off) for the named fields."""
    for name in fields:
        for i, (x, y) in enumerate(zip(getattr(a, name), getattr(b, name), strict=True)):
            if not torch.equal(x, y):
                diff = (x.float() - y.float()).abs().max().item()
                raise AssertionError(f"{what}: {name} of seq {i} differs (max |diff| {diff:g})")


# --------------------------------------------------------------------------------------------
# A small packed-attention block for the recompile check. Its attention mask is built from
# per-row segment ids (verl convention: pad rows belong to their sequence), so every tensor it
# sees has a shape that depends on the packed total alone.
class PackedBlock(torch.nn.Module):
    """qkv projection, per-sequence causal attention (dense mask from segment ids), output proj."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
        t, hidden = x.shape
        q, k, v = self.qkv(x).view(t, 3, self.heads, hidden // self.heads).unbind(1)
        rows = torch.arange(t, device=x.device)
        mask = (seg[:, None] == seg[None, :]) & (rows[None, :] <= rows[:, None])
        o = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask
        )
        return self.proj(o.transpose(0, 1).reshape(t, hidden))


def block_reference_fp32(block: PackedBlock, x: torch.Tensor) -> torch.Tensor:
    """The block on ONE unpacked sequence ``[L, hidden]`` with the explicit fp32 reference."""
    with exact_fp32():
        w = {n: p.detach().float() for n, p in block.named_parameters()}
        n, hidden = x.shape
        qkv = x.float() @ w["qkv.weight"].T + w["qkv.bias"]
        q, k, v = qkv.view(n, 3, block.heads, hidden // block.heads).unbind(1)
        o = causal_attention_fp32(q, k, v).reshape(n, hidden)
        return o @ w["proj.weight"].T + w["proj.bias"]


def segment_ids(plan: Any, device: torch.device | str) -> torch.Tensor:
    """Sequence index of every row of a cp=1 buffer, padding included (R-META-6)."""
    padded = torch.as_tensor(plan.seqlens_padded, dtype=torch.int64)
    return torch.repeat_interleave(torch.arange(padded.numel()), padded).to(device)


class GraphCounter:
    """A torch.compile backend that counts the graphs it is handed and delegates to ``backend``."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        self.graphs += 1
        if self.backend == "eager":
            return gm.forward
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend(self.backend)(gm, example_inputs)


@contextlib.contextmanager
def recompile_limit(limit: int) -> Iterator[None]:
    """Raise dynamo's recompile limit so that a long stream is not cut short (and miscounted)."""
    cfg = torch._dynamo.config
    names = [n for n in ("recompile_limit", "cache_size_limit") if hasattr(cfg, n)][:1]
    old = {n: getattr(cfg, n) for n in names}
    for n in names:
        setattr(cfg, n, limit)
    try:
        yield
    finally:
        for n, val in old.items():
            setattr(cfg, n, val)


@dataclass
class CompileStream:
    """Outcome of compiling the block over one stream of micro-batches."""

    graphs: int
    totals: list[int]
    max_error: float


def compile_stream(
    impl_mod: Any,
    block: PackedBlock,
    batches: Sequence[Sequence[int]],
    config: Any,
    *,
    backend: str,
    device: torch.device | str,
    seed: int = 0,
) -> CompileStream:
    """Run ``torch.compile(block, dynamic=False)`` over the packed stream; count graphs and check
    every real token against the fp32 per-sequence reference."""
    torch._dynamo.reset()
    counter = GraphCounter(backend)
    compiled = torch.compile(block, backend=counter, dynamic=False)
    g = torch.Generator().manual_seed(seed)
    hidden = block.qkv.in_features
    totals = []
    max_error = 0.0
    with recompile_limit(4 * len(batches) + 8), torch.no_grad():
        for lengths in batches:
            seqs = [torch.randn(n, hidden, generator=g).to(device) for n in lengths]
            x, _, plan = impl_mod.pack_thd(seqs, config, 0)
            x = x.to(device)
            totals.append(int(plan.total))
            y = compiled(x, segment_ids(plan, device))
            for got, s in zip(real_rows(y, plan), seqs, strict=True):
                want = block_reference_fp32(block, s)
                torch.testing.assert_close(got.float(), want, atol=1e-3, rtol=1e-3)
                if s.shape[0]:
                    max_error = max(max_error, (got.float() - want).abs().max().item())
    torch._dynamo.reset()
    return CompileStream(counter.graphs, totals, max_error)


def stream_batches(seed: int, count: int, *, max_len: int = 300) -> list[list[int]]:
    """A seeded stream of micro-batch lengths for the recompile check."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        b = int(torch.randint(1, 5, (1,), generator=g))
        out.append([int(x) for x in torch.randint(0, max_len + 1, (b,), generator=g)])
    return out
