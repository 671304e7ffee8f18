"""AReaL 1.0.4's seqpack allocators as binners (thd_packing/peers/areal_bins.py), judged by
hand: a contract sweep, each claim against the reference, and each bug pinned against AReaL's
own function (docs/findings/bins-areal.md)."""

from __future__ import annotations

import importlib.metadata
import logging
import math
from typing import Any

import numpy as np
import pytest

pytest.importorskip("thd_packing.peers.areal_bins")
try:
    _DIST: Any = importlib.metadata.distribution("areal")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(_DIST is None, reason="areal is not installed "
                                "(install areal==1.0.4 --no-deps)")

from thd_packing.peers import _bins, areal_bins  # noqa: E402
from thd_packing.reference import bins as rb  # noqa: E402


@pytest.fixture(scope="module")
def sp() -> Any:
    logging.getLogger("thd_packing.areal").setLevel(logging.ERROR)  # kk's fallback warning
    return areal_bins.module()[0]


def _config(target: Any, capacity: int) -> dict[str, Any]:
    return {"capacity": capacity, "algorithm": next(iter(target.declared_bins.algorithms), None),
            "order": "placement"}


def test_the_code_comes_from_the_wheel(sp: Any) -> None:
    path = str(_DIST.locate_file(areal_bins.PATH))
    assert sp.ffd_allocate.__code__.co_filename == path
    assert sp.kk_allocate.__code__.co_filename == path


@pytest.mark.parametrize("cls", areal_bins.TARGETS, ids=lambda c: c.name)
def test_contract_holds_on_random_draws(cls: Any, sp: Any) -> None:
    """300 non-empty draws (some lengths 0, some min_bins): every contract check passes."""
    target = cls()
    rng = np.random.default_rng(40)
    done = 0
    while done < 300:
        lengths, capacity = _bins.draw(rng, zero=done % 5 == 0, big=done % 3 == 0)
        if not lengths:
            continue  # test_no_examples_is_a_runtime_error
        config = _config(target, capacity)
        if done % 7 == 0:
            config["min_bins"] = int(rng.integers(1, 4))
        try:
            _bins.reference(lengths, config)
        except ValueError:
            with pytest.raises(RuntimeError):
                target.bin(np.asarray(lengths, dtype=np.int64), config)
            done += 1
            continue
        _bins.checked(target, lengths, config)
        done += 1


def test_ffd_allocate_is_not_first_fit_decreasing(sp: Any) -> None:
    """Bug (a claim it does not keep): AReaL calls `ffd_allocate` First Fit Decreasing, but it
    puts each value into the group with the fewest items among those it fits, not the first.
    Smallest case (exhaustive over 1..6 values up to capacity 8): [2, 2, 3, 4, 5] into 8 makes
    3 micro-batches where first fit decreasing, and the optimum, make 2 ({5, 3}, {4, 2, 2}):
    one more forward and backward pass over under-filled micro-batches (compute wasted; no
    token lost, no bin over capacity)."""
    values = [2, 2, 3, 4, 5]
    groups = sp.ffd_allocate(values, 8, 1)
    assert [[values[i] for i in g] for g in groups] == [[5, 2], [4, 3], [2]]
    config = rb.BinConfig(capacity=8)
    assert len(rb.bin_lengths(values, config).bins) == 2 == rb.optimum(values, config)


def test_kk_allocate_is_r_bin_15_where_no_tie_arises(sp: Any) -> None:
    """Tie-free weights (distinct powers of two, 200 draws, capacity below twice the largest):
    Karmarkar-Karp at AReaL's count `max(min_groups, ceil(total / capacity))` fits on every
    draw, and the bins are R-BIN-15's, bin for bin. (Where it does not fit, `kk_allocate` falls
    back: test_kk_allocate_falls_back_to_unbalanced_groups.)"""
    target = areal_bins.ArealKK()
    rng = np.random.default_rng(41)
    for _ in range(200):
        n = int(rng.integers(1, 13))
        values = [int(1 << e) for e in rng.permutation(14)[:n]]
        capacity = int(rng.integers(max(values), max(values) * 2))
        config = _config(target, capacity)
        got = _bins.checked(target, values, config)
        ref = _bins.reference(values, config)
        assert len(ref) == math.ceil(sum(values) / capacity)
        assert _bins.as_sets(got) == _bins.as_sets(ref)


def test_kk_allocate_falls_back_to_unbalanced_groups(sp: Any) -> None:
    """Not R-BIN-15 (a claim it does not keep): [5, 3, 2, 2] into 6 needs 3 groups; KK at
    ceil(12 / 6) = 2 overflows and `kk_allocate` returns `ffd_allocate`'s groups, sums 5, 5, 2
    (spread 3), where KK at 3 gives 5, 4, 3 (spread 2). Smallest case by exhaustive search.
    What a user loses: the balance between micro-batches that `packing_algorithm="kk"` was
    chosen for; no token, no capacity."""
    values = [5, 3, 2, 2]
    groups = sp.kk_allocate(values, 6, 1)
    assert sorted(sum(values[i] for i in g) for g in groups) == [2, 5, 5]
    assert groups == sp.ffd_allocate(values, 6, 1)
    ref = rb.bin_lengths(values, rb.BinConfig(capacity=6, algorithm="karmarkar_karp"))
    assert sorted(sum(b) for b in ref.lengths()) == [3, 4, 5]


def test_kk_allocate_misses_its_divisor(sp: Any) -> None:
    """Bug: `kk_allocate` rounds its group count up to `n_groups_divisor` and then caps it at
    the number of values, so where no multiple can be filled it returns a count that is not a
    multiple, silently; `ffd_allocate` raises for the same input. AReaL's Megatron engine
    passes `n_mbs_divisor = pp_size`: five near-capacity sequences with pp 2 give 5
    micro-batches, which an interleaved pipeline schedule refuses (the step fails) and a plain
    one runs unevenly. Smallest case: three values of 1, capacity 1, divisor 2."""
    assert len(sp.kk_allocate([1, 1, 1], 1, 1, n_groups_divisor=2)) == 3
    with pytest.raises(RuntimeError, match="Cannot allocate"):
        sp.ffd_allocate([1, 1, 1], 1, 1, n_groups_divisor=2)
    assert len(sp.kk_allocate([4, 4, 4, 4, 4], 4, 4, n_groups_divisor=2)) == 5


def test_no_examples_is_a_runtime_error(sp: Any) -> None:
    """R-BIN-1: no examples give no bins; both allocators raise RuntimeError (min_groups is
    at least 1), an exception the spec's callers do not expect. Low impact: AReaL never
    allocates an empty batch."""
    for allocate in (sp.ffd_allocate, sp.kk_allocate):
        with pytest.raises(RuntimeError, match="smaller than min_groups"):
            allocate([], 8, 1)


def test_overflow_is_a_runtime_error(sp: Any) -> None:
    """R-BIN-6 wants a ValueError naming the example; both raise RuntimeError with all values."""
    for allocate in (sp.ffd_allocate, sp.kk_allocate):
        with pytest.raises(RuntimeError):
            allocate([3, 10], 4, 1)


def test_bad_capacity_and_lengths_pass_silently(sp: Any) -> None:
    """R-BIN-1/R-BIN-2 fail: capacity 0 (with empty examples), 2.5 and True are taken, as are
    fractional and negative lengths. A negative length offsets others in `kk_allocate`: three
    values 3, 3, -3 under capacity 3 make one group holding 6 real tokens (OOM risk, were a
    caller's lengths ever negative; AReaL's are attention-mask sums)."""
    assert [list(map(int, g)) for g in sp.ffd_allocate([0, 0], 0, 1)] == [[0, 1]]
    assert [list(map(int, g)) for g in sp.ffd_allocate([1, 1], 2.5, 1)] == [[0, 1]]
    assert sp.kk_allocate([1], True, 1) == [[0]]
    assert sp.kk_allocate([1.5, 2.5], 8, 1) == [[1, 0]]
    assert sp.kk_allocate([3, 3, -3], 3, 1) == [[1, 0, 2]]


def test_the_wiring_lists_every_parameter() -> None:
    from thd_packing.peers import _wiring

    assert _wiring.problems(areal_bins.WIRING) == []


@pytest.mark.parametrize("field", [{"cost": "rows", "pack": {}}, {"overflow": "truncate"},
                                   {"algorithm": "best_fit_decreasing"}, {"shuffle": True}])
def test_refuses_what_it_cannot_express(field: dict[str, Any]) -> None:
    """A field without a counterpart is a NotImplementedError naming it, never a silent no-op."""
    target = areal_bins.TARGETS[0]()
    with pytest.raises(NotImplementedError, match=next(iter(field))):
        target.bin(np.array([1, 2]), {"capacity": 4, **field})
