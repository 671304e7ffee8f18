"""impl/bins.py against the literal reference (spec/bins.md): the golden vectors, a random
sweep of every convention, and the input forms a trainer hands it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import impl
from impl import bins as ib
from thd_packing import reference
from thd_packing.reference import bins as rb
from thd_packing.spec.vectors import generate_bins

VECTORS = [json.loads(p.read_text()) for p in sorted(generate_bins.HERE.glob("*.json"))]


def _config(fields: dict[str, Any]) -> ib.BinConfig:
    fields = dict(fields)
    if fields.get("pack") is not None:
        fields["pack"] = impl.PackConfig(**fields["pack"])
    return ib.BinConfig(**fields)


def _outcome(call: Any) -> Any:
    try:
        return call()
    except (TypeError, ValueError) as error:
        return type(error).__name__


@pytest.mark.rules("R-BIN-1", "R-BIN-2", "R-BIN-3", "R-BIN-4", "R-BIN-5", "R-BIN-6", "R-BIN-7",
                   "R-BIN-8", "R-BIN-9", "R-BIN-10", "R-BIN-11", "R-BIN-12", "R-BIN-13",
                   "R-BIN-14", "R-BIN-15", "R-BIN-16", "R-BIN-17", "R-BIN-18", "R-BIN-19",
                   "R-BIN-20")
@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    if vector["call"] == "partition":
        got = _outcome(lambda: ib.partition(vector["weights"], vector["k"],
                                            vector["equal_size"]))
        assert got == vector.get("parts", vector.get("error"))
        return
    if vector["call"] == "ranks":
        config = _config(vector["config"])
        bins = ib.bin_lengths(vector["lengths"], config)
        assert ib.bin_costs(bins, config) == vector["costs"]
        assert ib.ranks(bins, config, vector["dp_size"]) == vector["ranks"]
        return

    def run() -> tuple[list[list[list[int]]], list[str]]:
        out = ib.bin_lengths(vector["lengths"], _config(vector["config"]))
        return [[list(p) for p in b] for b in out.bins], out.fates

    got = _outcome(run)
    assert got == (vector.get("error") or (vector["bins"], vector["fates"]))
    if "ranks" in vector:
        config = _config(vector["config"])
        bins = ib.bin_lengths(vector["lengths"], config)
        assert ib.ranks(bins, config, vector["dp_size"]) == vector["ranks"]


PACKS = [
    {},
    {"tp_size": 2, "cp_size": 4},
    {"cp_size": 3, "cp_layout": "contiguous", "seq_align": "none"},
    {"tp_size": 2, "fp8": True},
    {"cp_size": 2, "fp8": "nvfp4", "bucket": 512},
    {"bucket": 1000, "min_local_rows": 300},
    {"max_num_seqs": 3, "tail": "segment"},
    {"max_num_seqs": 2},
    {"fixed_total": 4096, "tp_size": 2},
]


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[int], dict[str, Any]]:
    """Every convention; capacities from 1 to 2**20; lengths from 0 to the capacity and past
    it; as many items as the literal reference can take in a unit test."""
    algorithm = draw(st.sampled_from(rb.ALGORITHMS))
    cost = draw(st.sampled_from(rb.COSTS))
    capacity = draw(st.one_of(st.integers(1, 64), st.integers(1, 2**20)))
    fields: dict[str, Any] = {"capacity": capacity, "algorithm": algorithm, "cost": cost,
                              "overflow": "split" if algorithm == "wrapped"
                              else draw(st.sampled_from(rb.OVERFLOWS)),
                              "order": draw(st.sampled_from(rb.ORDERS))}
    if cost == "rows":
        fields["pack"] = draw(st.sampled_from(PACKS))
    if algorithm not in ("sequential", "wrapped") and draw(st.booleans()):
        fields["min_bins"] = draw(st.integers(1, 4))
        fields["bins_multiple_of"] = draw(st.integers(1, 4))
    top = min(2 * capacity, 2**21)
    if fields["overflow"] == "split" or algorithm == "wrapped":
        top = min(top, 8 * max(capacity, 1) + 8)
    length = st.one_of(st.just(0), st.integers(0, max(1, capacity // 3)), st.integers(0, top))
    lengths = draw(st.lists(length, max_size=10))
    return lengths, fields


def _both(lengths: Any, fields: dict[str, Any]) -> tuple[Any, Any]:
    def ref() -> Any:
        out = rb.bin_lengths(lengths, rb.as_config(fields))
        return [[tuple(p) for p in b] for b in out.bins], out.fates

    def fast() -> Any:
        out = ib.bin_lengths(lengths, _config(fields))
        return [[tuple(p) for p in b] for b in out.bins], out.fates

    return _outcome(ref), _outcome(fast)


@pytest.mark.rules("R-BIN-4", "R-BIN-5", "R-BIN-6", "R-BIN-7", "R-BIN-8", "R-BIN-9",
                   "R-BIN-10", "R-BIN-11", "R-BIN-12", "R-BIN-13", "R-BIN-14", "R-BIN-15",
                   "R-BIN-16", "R-BIN-17", "R-BIN-18")
@settings(max_examples=300, deadline=None)
@given(cases())
def test_impl_agrees_with_reference(case: tuple[list[int], dict[str, Any]]) -> None:
    """Every bin, every fate and every error class the same as the literal reference."""
    lengths, fields = case
    ref, fast = _both(lengths, fields)
    assert fast == ref


@pytest.mark.rules("R-BIN-19", "R-BIN-20")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2**20), max_size=70), st.integers(1, 64), st.booleans())
def test_partition_agrees_with_reference(weights: list[int], k: int, equal_size: bool) -> None:
    """Data-parallel sizes 1 to 64, equal sizes or not."""
    assert (_outcome(lambda: ib.partition(weights, k, equal_size))
            == _outcome(lambda: rb.partition(weights, k, equal_size)))


@pytest.mark.rules("R-BIN-1")
@pytest.mark.parametrize("form", [
    lambda x: torch.tensor(x, dtype=torch.int32),
    lambda x: torch.tensor(x, dtype=torch.int64),
    lambda x: torch.tensor(x)[::1].expand(len(x)),
    lambda x: torch.tensor([v for v in x for _ in (0, 1)])[::2],  # strided
    lambda x: np.array(x, dtype=np.uint16),
    tuple,
    lambda x: [np.int64(v) for v in x],
])
def test_input_forms(form: Any) -> None:
    """A host tensor of any integer dtype, strided or expanded, an array, a tuple, NumPy
    scalars: the same bins as the list."""
    lengths = [9, 30, 2, 17, 0, 25]
    config = ib.BinConfig(48)
    assert ib.bin_lengths(form(lengths), config) == ib.bin_lengths(lengths, config)
    assert ib.bin_lengths(lengths, config) == rb_as_impl(rb.bin_lengths(lengths, rb.BinConfig(48)))


@pytest.mark.rules("R-BIN-1")
@pytest.mark.parametrize("empty", [[], (), np.array([], dtype=np.int64),
                                   torch.tensor([], dtype=torch.int32)])
def test_no_examples(empty: Any) -> None:
    """No example, in any input form, gives no bins."""
    out = ib.bin_lengths(empty, ib.BinConfig(8))
    assert out.bins == [] and out.fates == []
    with pytest.raises(TypeError):
        ib.bin_lengths(torch.tensor([], dtype=torch.float32), ib.BinConfig(8))


def rb_as_impl(out: rb.Bins) -> ib.Bins:
    return ib.Bins(bins=[[ib.Piece(*p) for p in b] for b in out.bins], fates=out.fates)


@pytest.mark.rules("R-BIN-1")
@pytest.mark.parametrize(("lengths", "error", "name"), [
    (torch.tensor([1.0]), TypeError, "dtype"),
    (torch.tensor([True]), TypeError, "dtype"),
    (torch.tensor([[1]]), ValueError, "1-D"),
    (torch.tensor([1], device="meta"), ValueError, "meta"),
    (torch.tensor([3, -1]), ValueError, "-1"),
    ([3, True], TypeError, r"lengths\[1\]"),
    ([3, 2.0], TypeError, r"lengths\[1\]"),
    ([2**31], ValueError, "INT32_MAX"),
    ("12", TypeError, "lengths"),
])
def test_bad_lengths(lengths: Any, error: type[Exception], name: str) -> None:
    with pytest.raises(error, match=name):
        ib.bin_lengths(lengths, ib.BinConfig(8))


@pytest.mark.rules("R-BIN-2", "R-BIN-3")
@pytest.mark.parametrize("fields", [
    {"capacity": 0}, {"capacity": 2.5}, {"capacity": np.bool_(True)},
    {"capacity": 8, "algorithm": "bfd"}, {"capacity": 8, "cost": "rows"},
    {"capacity": 8, "pack": impl.PackConfig()}, {"capacity": 8, "algorithm": "wrapped"},
    {"capacity": 8, "min_bins": 0}, {"capacity": 8, "algorithm": "wrapped",
                                     "overflow": "split", "bins_multiple_of": 2},
    {"capacity": 255, "cost": "rows", "pack": impl.PackConfig(tp_size=2, fp8=True)},
    {"capacity": 8, "cost": "rows", "pack": reference.PackConfig()},
])
def test_bad_config_like_reference(fields: dict[str, Any]) -> None:
    """The same error class as the reference, before any length is read."""
    ref_fields = dict(fields)
    if isinstance(ref_fields.get("pack"), impl.PackConfig):
        ref_fields["pack"] = reference.PackConfig(**vars(ref_fields["pack"]))
    elif isinstance(ref_fields.get("pack"), reference.PackConfig):
        ref_fields["pack"] = object()
    got = _outcome(lambda: ib.BinConfig(**fields))
    assert got in ("TypeError", "ValueError")
    assert got == _outcome(lambda: rb.BinConfig(**ref_fields))


@pytest.mark.rules("R-BIN-5", "R-BIN-20")
def test_rows_bins_plan_within_capacity() -> None:
    """Under cost="rows" every bin's plan is at most the capacity; each rank takes as many
    bins, and the ranks' costs are those of the bins they took."""
    lengths = torch.randint(0, 3000, (500,), generator=torch.Generator().manual_seed(0))
    config = ib.BinConfig(8192, cost="rows", bins_multiple_of=8,
                          pack=impl.PackConfig(tp_size=2, cp_size=4, fp8=True))
    bins = ib.bin_lengths(lengths, config)
    totals = [plan.total for plan in ib.plans(bins, config)]
    assert max(totals) <= 8192 and len(bins.bins) % 8 == 0
    assert sorted(p.example for b in bins.bins for p in b) == list(range(500))
    ranks = ib.ranks(bins, config, 8)
    assert {len(r) for r in ranks} == {len(bins.bins) // 8}
    assert sorted(b for r in ranks for b in r) == list(range(len(bins.bins)))
    # The same lengths binned by their tokens overflow the rows they pack to.
    tokens = ib.bin_lengths(lengths, ib.BinConfig(8192))
    over = [impl.plan_thd(b, config.pack).total > 8192 for b in tokens.lengths()]
    assert any(over)
