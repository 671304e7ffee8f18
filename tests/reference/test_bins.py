"""The literal binner (reference/bins.py) against spec/bins.md: the worked examples, written out
by hand in the spec, and the rules as properties over random inputs."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thd_packing.reference import PackConfig
from thd_packing.reference import bins as rb
from thd_packing.spec.examples import bin_examples

EXAMPLES = bin_examples()


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["name"] for e in EXAMPLES])
def test_spec_example(example: dict[str, Any]) -> None:
    """B8: each worked example, its bins and fates as the spec writes them."""
    if "error" in example:
        with pytest.raises({"ValueError": ValueError, "TypeError": TypeError}[example["error"]]):
            rb.bin_lengths(example["lengths"], rb.as_config(example["config"]))
        return
    config = rb.as_config(example["config"])
    out = rb.bin_lengths(example["lengths"], config)
    assert [[list(p) for p in b] for b in out.bins] == example["bins"]
    assert out.fates == example["fates"]
    if "dp_size" in example:
        assert rb.ranks(out, config, example["dp_size"]) == example["ranks"]


def test_spec_examples_cover_every_rule() -> None:
    """Every R-BIN rule has a worked example in the spec, checked by hand there."""
    from thd_packing.spec.examples import rule_ids

    cited = {rule for example in EXAMPLES for rule in example["rules"]}
    assert {r for r in rule_ids() if r.startswith("R-BIN-")} <= cited


def test_spec_examples_cover_every_algorithm_and_overflow() -> None:
    seen = {e["config"].get("algorithm", "first_fit_decreasing") for e in EXAMPLES}
    assert set(rb.ALGORITHMS) <= seen
    overflows = {e["config"].get("overflow", "reject") for e in EXAMPLES}
    assert overflows == set(rb.OVERFLOWS)


PACKS = [
    PackConfig(),
    PackConfig(tp_size=2, cp_size=2),
    PackConfig(cp_size=3, cp_layout="contiguous", seq_align="none"),
    PackConfig(tp_size=2, fp8=True),
    PackConfig(bucket=16, min_local_rows=8),
    PackConfig(max_num_seqs=3, tail="segment"),
    PackConfig(fixed_total=64),
]


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[int], rb.BinConfig]:
    algorithm = draw(st.sampled_from(rb.ALGORITHMS))
    cost = draw(st.sampled_from(rb.COSTS))
    pack = draw(st.sampled_from(PACKS)) if cost == "rows" else None
    capacity = draw(st.integers(1, 80))
    if cost == "rows":
        capacity = draw(st.integers(16, 160))
    overflow = "split" if algorithm == "wrapped" else draw(st.sampled_from(rb.OVERFLOWS))
    extra: dict[str, int] = {}
    if algorithm not in ("sequential", "wrapped"):
        extra = {"min_bins": draw(st.integers(1, 3)), "bins_multiple_of": draw(st.integers(1, 3))}
    try:
        config = rb.BinConfig(capacity, algorithm, cost, pack, overflow,
                              draw(st.sampled_from(rb.ORDERS)), **extra)
    except ValueError:
        config = rb.BinConfig(capacity + 512, algorithm, cost, pack, overflow, **extra)
    lengths = draw(st.lists(st.integers(0, 2 * capacity), max_size=9))
    return lengths, config


def _run(lengths: list[int], config: rb.BinConfig) -> rb.Bins | None:
    try:
        return rb.bin_lengths(lengths, config)
    except ValueError as error:
        # The only values the rules reject here: an overflow under "reject" (R-BIN-6) and a bin
        # count the items cannot reach (R-BIN-17).
        message = str(error)
        assert "does not fit alone" in message or "min_bins" in message or (
            "bins_multiple_of" in message), message
        return None


@settings(max_examples=150, deadline=None)
@given(cases())
def test_every_token_once_every_bin_fits(case: tuple[list[int], rb.BinConfig]) -> None:
    """R-BIN-18, R-BIN-5, R-BIN-6..9: pieces tile what the fate keeps; every bin fits."""
    lengths, config = case
    out = _run(lengths, config)
    if out is None:
        return
    assert len(out.fates) == len(lengths)
    pieces = sorted(p for b in out.bins for p in b)
    for i, (length, fate) in enumerate(zip(lengths, out.fates, strict=True)):
        mine = [p for p in pieces if p.example == i]
        if fate == "dropped":
            assert not mine and config.overflow == "drop"
        elif fate == "truncated":
            assert len(mine) == 1 and mine[0].start == 0 and mine[0].length < length
            assert config.overflow == "truncate"
        elif fate == "whole":
            assert mine == [rb.Piece(i, 0, length)]
        else:
            assert fate == "split" and (config.overflow == "split")
            assert len(mine) >= 2 and mine[0].start == 0
            assert all(a.start + a.length == b.start for a, b in itertools.pairwise(mine))
            assert mine[-1].start + mine[-1].length == length
    for b in out.bins:
        assert b, "an empty bin (R-BIN-17)"
        assert rb.fits(config, [p.length for p in b])
    assert len(out.bins) >= config.min_bins or not out.bins
    assert len(out.bins) % config.bins_multiple_of == 0
    if config.order == "input":
        assert all(b == sorted(b) for b in out.bins)
    assert rb.bin_lengths(lengths, config) == out  # no randomness


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=9), st.integers(30, 60))
def test_first_fit_decreasing_bound(lengths: list[int], capacity: int) -> None:
    """R-BIN-11: FFD <= 11/9 OPT + 6/9; and L2 <= OPT <= every algorithm's count (B7)."""
    config = rb.BinConfig(capacity)
    best = rb.optimum(lengths, config)
    assert 9 * len(rb.bin_lengths(lengths, config).bins) <= 11 * best + 6
    assert rb.lower_bound(lengths, config) <= best
    for algorithm in rb.ALGORITHMS:
        count = len(rb.bin_lengths(lengths, rb.BinConfig(
            capacity, algorithm, overflow="split" if algorithm == "wrapped" else "reject")).bins)
        if algorithm != "wrapped":  # wrapped cuts, so it may beat the whole-item optimum
            assert count >= best


def test_optimum_and_lower_bound_by_hand() -> None:
    """B7 on a case worked by hand: sizes 6, 6, 6, 4, 4, 4 in bins of 10 pair as 6 + 4 three
    times (OPT 3); L1 = ceil(30 / 10) = 3."""
    config = rb.BinConfig(10)
    assert rb.optimum([6, 6, 6, 4, 4, 4], config) == 3
    assert rb.lower_bound([6, 6, 6, 4, 4, 4], config) == 3
    # Three items over half the capacity need three bins though they sum to 18 < 2 * 10:
    # L1 = 2, L2 = 3.
    assert rb.lower_bound([6, 6, 6], config) == 3
    assert rb.lower_bound([0, 0], config) == 1  # examples of no token still need a bin
    assert rb.lower_bound([], config) == 0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=12), st.integers(1, 5),
       st.booleans())
def test_partition_is_a_partition(weights: list[int], k: int, equal_size: bool) -> None:
    """R-BIN-19: k parts of every index once, each ascending; equal sizes when asked."""
    if k > len(weights) or (equal_size and len(weights) % k):
        with pytest.raises(ValueError):
            rb.partition(weights, k, equal_size)
        return
    parts = rb.partition(weights, k, equal_size)
    assert len(parts) == k
    assert sorted(i for p in parts for i in p) == list(range(len(weights)))
    assert all(p == sorted(p) for p in parts)
    if equal_size:
        assert {len(p) for p in parts} == {len(weights) // k}
    sums = [sum(weights[i] for i in p) for p in parts]
    assert sums == sorted(sums, reverse=True)


def test_partition_by_hand() -> None:
    """R-BIN-19 on B8.6's sizes; and two parts of 4, 5, 6, 7 with equal sizes: the runs (4, 5)
    and (6, 7) make states {5} {4} and {7} {6}; merging pairs 7 with 4 and 6 with 5."""
    assert rb.partition([8, 7, 6, 5, 4], 2) == [[1, 3, 4], [0, 2]]
    assert rb.partition([4, 5, 6, 7], 2, equal_size=True) == [[0, 3], [1, 2]]


def test_ranks_balance_bins() -> None:
    """R-BIN-20: bins of 10, 9, 2, 1 tokens over 2 ranks: 10 + 1 and 9 + 2."""
    config = rb.BinConfig(10, algorithm="sequential")
    out = rb.bin_lengths([10, 9, 2, 1], config)
    assert out.lengths() == [[10], [9], [2, 1]]
    config = rb.BinConfig(10)
    out = rb.bin_lengths([10, 9, 2, 1], config)
    assert out.lengths() == [[10], [9, 1], [2]] and len(out.bins) == 3
    with pytest.raises(ValueError, match="dp_size=2"):
        rb.ranks(out, config, 2)
    out = rb.bin_lengths([10, 9, 2, 1], rb.BinConfig(10, min_bins=4))
    assert rb.bin_costs(out, config) == [10, 9, 2, 1]
    assert rb.ranks(out, config, 2) == [[0, 3], [1, 2]]


BAD_CONFIGS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"capacity": 0}, ValueError, "capacity"),
    ({"capacity": 2.5}, TypeError, "capacity"),
    ({"capacity": True}, TypeError, "capacity"),
    ({"capacity": 8, "algorithm": "ffd"}, ValueError, "algorithm"),
    ({"capacity": 8, "cost": "bytes"}, ValueError, "cost"),
    ({"capacity": 8, "cost": "rows"}, TypeError, "pack"),
    ({"capacity": 8, "pack": PackConfig()}, ValueError, "pack"),
    ({"capacity": 8, "overflow": "clip"}, ValueError, "overflow"),
    ({"capacity": 8, "algorithm": "wrapped"}, ValueError, "overflow"),
    ({"capacity": 8, "order": 1}, TypeError, "order"),
    ({"capacity": 8, "min_bins": 0}, ValueError, "min_bins"),
    ({"capacity": 8, "bins_multiple_of": 0}, ValueError, "bins_multiple_of"),
    ({"capacity": 8, "algorithm": "sequential", "min_bins": 2}, ValueError, "min_bins"),
    ({"capacity": 8, "cost": "rows", "pack": PackConfig(bucket=16)}, ValueError, "capacity"),
    ({"capacity": 64, "cost": "rows", "pack": PackConfig(max_num_seqs=1, tail="segment")},
     ValueError, "capacity"),
]


@pytest.mark.parametrize(("fields", "error", "name"), BAD_CONFIGS)
def test_bad_config(fields: dict[str, Any], error: type[Exception], name: str) -> None:
    """R-BIN-2, R-BIN-3: a typed error naming the field."""
    with pytest.raises(error, match=name):
        rb.BinConfig(**fields)


@pytest.mark.parametrize(("lengths", "error", "name"), [
    ([3, -1], ValueError, r"lengths\[1\]"),
    ([3, 2.0], TypeError, r"lengths\[1\]"),
    ([True], TypeError, r"lengths\[0\]"),
    ([2**31], ValueError, r"lengths\[0\]"),
    (np.array([1.0]), TypeError, "dtype"),
    (np.array([[1]]), ValueError, "1-D"),
    ("12", TypeError, "lengths"),
    ({1: 2}, TypeError, "lengths"),
])
def test_bad_lengths(lengths: Any, error: type[Exception], name: str) -> None:
    """R-BIN-1."""
    with pytest.raises(error, match=name):
        rb.bin_lengths(lengths, rb.BinConfig(8))


def test_counts_out_of_reach() -> None:
    """R-BIN-17: more bins than items; a multiple out of reach (3 items, multiples of 2: one
    bin is too few, 4 too many)."""
    with pytest.raises(ValueError, match="min_bins=3"):
        rb.bin_lengths([1, 1], rb.BinConfig(8, min_bins=3))
    with pytest.raises(ValueError, match="bins_multiple_of=2"):
        rb.bin_lengths([8, 8, 8], rb.BinConfig(8, bins_multiple_of=2))
    assert rb.bin_lengths([], rb.BinConfig(8)).bins == []
    assert rb.bin_lengths(np.array([], dtype=np.int64), rb.BinConfig(8)).fates == []
