"""impl against the reference over spec 1.2's conventions, mixed with every 1.1 dimension.

Random configs draw seq_align "none", fixed totals (fitting, too small, not a multiple of M),
tail "tokens", labels "ignore" with its ignore_index, next to every layout, tp and cp 1-4, every
tail, FP8 recipes, buckets and static metadata. Configs the spec refuses (R-ERR-14) must be
refused by both with ValueError; plans must agree field by field, packs on every specified slot
bit for bit (labels included), loss masks exactly, and no position id may be negative.
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

FP8 = [False, True, "tensor", "mxfp8", "block", "nvfp4"]


def _batch(seqlens: list[int], trail: tuple[int, ...], dtype: str) -> list[np.ndarray]:
    """Values that name their sequence and offset (mod 200), broadcast over trailing dims."""
    out = []
    for i, n in enumerate(seqlens):
        width = int(np.prod(trail)) if trail else 1
        base = np.arange(n, dtype=np.int64)[:, None] + 1000 * (i + 1) + 7 * np.arange(width)
        base = base.reshape((n, *trail))
        out.append((base % 3 == 0) if dtype == "bool" else (base % 200).astype(dtype))
    return out


def _same(a: torch.Tensor, b: np.ndarray) -> bool:
    """Bitwise equality (NaN equal to NaN)."""
    return bool(np.array_equal(a.numpy(), b, equal_nan=a.numpy().dtype.kind in "fc"))


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    cp = draw(st.integers(1, 4))
    tp = draw(st.integers(1, 4))
    seqlens = draw(st.lists(st.integers(0, 20), min_size=1, max_size=6))
    tail = draw(st.sampled_from(["last", "segment", "tokens"]))
    config: dict[str, Any] = {
        "tp_size": tp,
        "cp_size": cp,
        "cp_layout": draw(st.sampled_from(["zigzag", "contiguous"])),
        "fp8": draw(st.sampled_from(FP8)) if tp * cp <= 4 else False,  # keep F (rows) small
        "min_local_rows": draw(st.one_of(st.none(), st.integers(1, 20))),
        "tail": tail,
        "seq_align": draw(st.sampled_from(["tp_cp", "cp", "none"])),
        "max_num_seqs": draw(st.one_of(st.none(), st.integers(len(seqlens), len(seqlens) + 3))),
        "max_seqlen": draw(st.sampled_from(["exact", "total"])),
        "labels": draw(st.sampled_from(["roll", "ignore"])),
        "ignore_index": draw(st.sampled_from([-100, -1, 0, 255])),
    }
    if draw(st.integers(0, 4)):  # mostly a valid combination: R-ERR-14's are drawn too
        if "none" in (config["seq_align"], "none" if tail == "tokens" else ""):
            config["cp_layout"] = "contiguous"
        if tail == "tokens":
            config["max_num_seqs"] = None
    sizing = draw(st.sampled_from(["none", "bucket", "fixed", "fixed", "fixed-small",
                                   "fixed-odd"]))
    if sizing == "bucket":
        config["bucket"] = draw(st.integers(1, 40))
    elif sizing != "none":
        try:
            modulus = ref.PackConfig(**config).total_modulus
        except ValueError:
            modulus = 1  # the config is refused anyway (R-ERR-14)
        steps = draw(st.integers(1, 6))
        config["fixed_total"] = modulus * steps + (1 if sizing == "fixed-odd" else 0)
        if sizing == "fixed" and modulus > 1:  # room for the batch: usually fits
            config["fixed_total"] = modulus * (steps + 120 // modulus + 1)
    dtype = draw(st.sampled_from(["int64", "int32", "uint8", "float32", "bool"]))
    pad_value: Any = 0 if dtype in ("bool", "uint8") else draw(st.sampled_from([0, -1, 7]))
    return {"config": config, "seqlens": seqlens, "dtype": dtype, "pad_value": pad_value,
            "trail": draw(st.sampled_from([(), (2,)])), "need_roll": draw(st.booleans())}


def _both(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """(reference result, impl result), or (None, None) when both raise the same class."""
    try:
        want = call(ref, *args, **kwargs)
    except (TypeError, ValueError) as err:
        with pytest.raises(type(err)):
            call(impl, *args, **kwargs)
        return None, None
    return want, call(impl, *args, **kwargs)


@pytest.mark.rules(
    "R-ALIGN-6", "R-TOTAL-7", "R-TAIL-3", "R-TAIL-4", "R-LABEL-1", "R-LABEL-2", "R-LABEL-3",
    "R-POS-4", "R-ERR-14", "R-ERR-15", "R-ERR-16", "R-META-1", "R-META-2", "R-META-3",
    "R-ROW-1", "R-ROW-2", "R-ROLL-1", "R-UNPACK-2",
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_impl_matches_reference_1_2(case: dict[str, Any]) -> None:
    """Config verdicts, plans, packs (rows, labels, position ids), loss masks and unpack agree."""
    rcfg, icfg = _both(lambda m: m.PackConfig(**case["config"]))
    if rcfg is None:
        return
    try:
        rplan = ref.plan_thd(case["seqlens"], rcfg)
    except ValueError as err:
        with pytest.raises(ValueError, match=str(err).split("=")[0]):
            impl.plan_thd(case["seqlens"], icfg)
        return
    iplan = impl.plan_thd(case["seqlens"], icfg)
    for field in ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded"):
        assert getattr(iplan, field).tolist() == getattr(rplan, field).tolist(), field
    for field in ("max_seqlen", "total", "local_rows", "num_seqs"):
        assert getattr(iplan, field) == getattr(rplan, field), field
    if rcfg.fixed_total is not None:
        assert rplan.total == rcfg.fixed_total  # R-TOTAL-7

    np_batch = _batch(case["seqlens"], case["trail"], case["dtype"])
    t_batch = [torch.from_numpy(a) for a in np_batch]
    kw = {"need_roll": case["need_roll"], "pad_value": case["pad_value"]}
    shards = []
    for rank in range(icfg.cp_size):
        try:
            r_rows, r_pos, _ = ref.pack_thd(np_batch, rcfg, rank, **kw)
        except ValueError as err:  # R-ERR-16: ignore_index outside the dtype
            assert "ignore_index" in str(err)
            with pytest.raises(ValueError, match="ignore_index"):
                impl.pack_thd(t_batch, icfg, rank, **kw)
            return
        i_rows, i_pos, _ = impl.pack_thd(t_batch, icfg, rank, **kw)
        rows_spec, pos_spec = ref.specified_slots(rplan, rcfg, rank, case["need_roll"])
        assert _same(i_rows[torch.from_numpy(rows_spec)], r_rows[rows_spec]), rank
        assert np.array_equal(i_pos.numpy()[pos_spec], r_pos[pos_spec]), rank
        assert (r_pos >= 0).all() and bool((i_pos >= 0).all())  # R-POS-4
        mask = impl.loss_mask(iplan, icfg, rank)
        assert mask.tolist() == ref.loss_mask(rplan, rcfg, rank).tolist()  # R-LABEL-3
        shards.append(i_rows)
    if not case["need_roll"]:
        out = impl.unpack_thd(shards, iplan, icfg)
        assert all(_same(a, b) for a, b in zip(out, np_batch, strict=True))
