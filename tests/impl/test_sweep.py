"""Differential sweep: impl against the literal reference on every config dimension.

A small hypothesis sweep (fast unit test; the big differential suite lives in conformance/).
It covers tp, cp 1..8 (non-powers of two too), both layouts, fp8 (bool and every recipe),
buckets (also ones that are not multiples of the alignment), min_local_rows, both tails, both
seq_aligns, max_num_seqs (also one too small, R-ERR-13), both max_seqlen policies, need_roll,
pad_value, zero-length sequences, trailing dims and int/float/bool dtypes. Only slots the spec
specifies are compared (`reference.specified_slots`, R-POS-3, R-ROLL-2).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import impl
from thd_packing import reference as ref

DTYPES = ["int64", "int32", "uint8", "float32", "float16", "float64", "bool", "complex64"]


def _batch(seqlens: list[int], trail: tuple[int, ...], dtype: str) -> list[np.ndarray]:
    out = []
    for i, n in enumerate(seqlens):
        width = int(np.prod(trail)) if trail else 1
        base = np.arange(n, dtype=np.int64)[:, None] + 1000 * (i + 1) + 7 * np.arange(width)
        base = base.reshape((n, *trail))
        out.append((base % 3 == 0) if dtype == "bool" else (base % 200).astype(dtype))
    return out


FP8 = [False, True, "tensor", "mxfp8", "block", "nvfp4"]


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    cp = draw(st.integers(1, 8))
    fp8 = draw(st.sampled_from(FP8)) if cp <= 2 else False  # keep F (rows) small
    seqlens = draw(st.lists(st.integers(0, 23), min_size=1, max_size=6))
    tail = draw(st.sampled_from(["last", "segment"]))
    # max_num_seqs: mostly room to spare, sometimes exactly full, sometimes one too few
    # (R-ERR-13, which both must raise)
    need = len(seqlens) + (tail == "segment")
    max_num_seqs = draw(st.one_of(st.none(), st.integers(max(1, need - 1), need + 3)))
    config = {
        "tp_size": draw(st.integers(1, 3)),
        "cp_size": cp,
        "cp_layout": draw(st.sampled_from(["zigzag", "contiguous"])),
        "fp8": fp8,
        "bucket": draw(st.one_of(st.none(), st.integers(1, 40))),
        "min_local_rows": draw(st.one_of(st.none(), st.integers(1, 20))),
        "tail": tail,
        "seq_align": draw(st.sampled_from(["tp_cp", "cp"])),
        "max_num_seqs": max_num_seqs,
        "max_seqlen": draw(st.sampled_from(["exact", "total"])),
    }
    dtype = draw(st.sampled_from(DTYPES))
    pad_value: Any = draw(st.sampled_from([0, 1, -1, 7]))
    if dtype == "bool":
        pad_value = draw(st.sampled_from([False, True, 0, 1]))
    elif dtype == "uint8":
        pad_value = draw(st.sampled_from([0, 1, 255]))
    elif dtype.startswith("float"):
        pad_value = draw(st.sampled_from([0, -100, 0.5, float("-inf"), float("nan")]))
    return {
        "config": config,
        "seqlens": seqlens,
        "trail": draw(st.sampled_from([(), (2,), (2, 3)])),
        "dtype": dtype,
        "need_roll": draw(st.booleans()),
        "pad_value": pad_value,
    }


def _same(a: torch.Tensor, b: np.ndarray) -> bool:
    """Bitwise-faithful equality that treats NaN as equal to NaN."""
    x = a.numpy()
    if x.dtype.kind in "fc":
        return bool(np.array_equal(x, b, equal_nan=True))
    return bool(np.array_equal(x, b))


def _plans(seqlens: list[int], rcfg: Any, icfg: impl.PackConfig) -> tuple[Any, Any]:
    """Both plans, compared field by field; (None, None) when both reject the batch's B
    (R-ERR-13), with ValueError naming max_num_seqs."""
    try:
        rplan = ref.plan_thd(seqlens, rcfg)
    except ValueError as err:
        assert "max_num_seqs" in str(err), err
        with pytest.raises(ValueError, match="max_num_seqs"):
            impl.plan_thd(seqlens, icfg)
        return None, None
    iplan = impl.plan_thd(seqlens, icfg)
    for field in ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded"):
        assert getattr(iplan, field).tolist() == getattr(rplan, field).tolist(), field
    for field in ("max_seqlen", "total", "local_rows", "num_seqs"):
        got, want = getattr(iplan, field), getattr(rplan, field)
        assert type(got) is int and got == want, field
    return rplan, iplan


@pytest.mark.rules(
    "R-ALIGN-1",
    "R-ALIGN-2",
    "R-ALIGN-3",
    "R-ALIGN-4",
    "R-ALIGN-5",
    "R-FP8-1",
    "R-TOTAL-1",
    "R-TOTAL-2",
    "R-TOTAL-3",
    "R-TOTAL-4",
    "R-TOTAL-5",
    "R-META-1",
    "R-META-2",
    "R-META-3",
    "R-META-4",
    "R-META-5",
    "R-META-7",
    "R-TAIL-1",
    "R-TAIL-2",
    "R-STATIC-1",
    "R-STATIC-2",
    "R-ERR-13",
    "R-SHARD-1",
    "R-SHARD-2",
    "R-SHARD-3",
    "R-SHARD-4",
    "R-ROW-1",
    "R-ROW-2",
    "R-ROW-3",
    "R-POS-1",
    "R-POS-2",
    "R-ROLL-1",
    "R-ROLL-3",
    "R-UNPACK-1",
    "R-UNPACK-2",
    "R-UNPACK-3",
    "R-IN-1",
    "R-IN-2",
    "R-IN-5",
)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_impl_matches_reference(case: dict[str, Any]) -> None:
    """Plan, rows and position ids on every rank agree on specified slots; unpack inverts."""
    np_batch = _batch(case["seqlens"], case["trail"], case["dtype"])
    t_batch = [torch.from_numpy(a) for a in np_batch]
    rcfg = ref.PackConfig(**case["config"])
    icfg = impl.PackConfig(**case["config"])
    rplan, iplan = _plans(case["seqlens"], rcfg, icfg)
    if rplan is None:
        with pytest.raises(ValueError, match="max_num_seqs"):
            impl.pack_thd(t_batch, icfg, 0)
        return
    shards = []
    for rank in range(icfg.cp_size):
        kw = {"need_roll": case["need_roll"], "pad_value": case["pad_value"]}
        r_rows, r_pos, _ = ref.pack_thd(np_batch, rcfg, rank, **kw)
        i_rows, i_pos, _ = impl.pack_thd(t_batch, icfg, rank, **kw)
        rows_spec, pos_spec = ref.specified_slots(rplan, rcfg, rank, case["need_roll"])
        assert i_rows.dtype == t_batch[0].dtype and i_pos.dtype == torch.int64
        assert tuple(i_rows.shape) == r_rows.shape
        assert _same(i_rows[torch.from_numpy(rows_spec)], r_rows[rows_spec]), rank
        assert np.array_equal(i_pos.numpy()[pos_spec], r_pos[pos_spec]), rank
        shards.append(i_rows)
    if not case["need_roll"]:
        out = impl.unpack_thd(shards, iplan, icfg)
        assert all(_same(a, b) for a, b in zip(out, np_batch, strict=True))


@pytest.mark.rules(
    "R-SHARD-1", "R-SHARD-2", "R-SHARD-3", "R-SHARD-4", "R-ALIGN-4", "R-META-6", "R-TAIL-1"
)
@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_row_map_matches_reference(case: dict[str, Any]) -> None:
    """impl's row map (what pack gathers through) equals the reference's, row by row."""
    from impl.rowmap import row_sources

    rcfg = ref.PackConfig(**case["config"])
    icfg = impl.PackConfig(**case["config"])
    rplan, iplan = _plans(case["seqlens"], rcfg, icfg)
    if rplan is None:
        return
    for rank in range(icfg.cp_size):
        seq, offset, real = row_sources(iplan, icfg, rank)
        got = list(zip(seq.tolist(), offset.tolist(), real.tolist(), strict=True))
        want = [(s.seq, s.offset, s.real) for s in ref.row_map(rplan, rcfg, rank)]
        assert got == want, rank
