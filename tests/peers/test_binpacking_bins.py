"""binpacking 2.0.1's to_constant_volume as a binner (thd_packing/peers/binpacking_bins.py).

(a) Random lengths through the contract; it claims no spec algorithm (its loop is worst fit
decreasing), so its bin count is compared with the reference's best fit decreasing as a
figure. (b) Each real bug pinned against `binpacking.to_constant_volume` itself.
"""

from __future__ import annotations

import random

import pytest

binpacking = pytest.importorskip("binpacking")

from thd_packing.conformance.bins_contract import check_bins  # noqa: E402
from thd_packing.conformance.buffer import RuleViolation  # noqa: E402
from thd_packing.peers import _wiring  # noqa: E402
from thd_packing.peers.binpacking_bins import WIRING, BinpackingToConstantVolume  # noqa: E402
from thd_packing.reference import bins as rb  # noqa: E402


def _tcv(lengths: list[float], capacity: float, **kw: float) -> list[list[int]]:
    """binpacking's own call, as ms-swift makes it; the example indices of each bin."""
    bins = binpacking.to_constant_volume(list(enumerate(lengths)), capacity, weight_pos=1, **kw)
    return [[i for i, _ in b] for b in bins]


def test_contract_on_lengths_that_fit() -> None:
    """300 draws of lengths 0..capacity (zero included): the contract holds under reject and
    under drop (upper_bound), and it never uses fewer bins than best fit decreasing."""
    target = BinpackingToConstantVolume()
    rng = random.Random(7)
    more = 0
    for _ in range(300):
        capacity = rng.randint(1, 30)
        lengths = [rng.randint(0, capacity) for _ in range(rng.randint(1, 16))]
        for overflow in ("reject", "drop"):
            config = {"capacity": capacity, "overflow": overflow, "order": "placement"}
            got = check_bins(lengths, target.bin(lengths, config).bins, config)
        ref = rb.bin_lengths(lengths, rb.BinConfig(capacity, algorithm="best_fit_decreasing"))
        assert len(got) >= len(ref.bins)
        more += len(got) > len(ref.bins)
    assert more > 0  # worst fit decreasing loses to best fit now and then (figures: the page)


def test_drop_leaves_out_overlong_examples() -> None:
    """overflow="drop" is upper_bound=capacity (R-BIN-9)."""
    target = BinpackingToConstantVolume()
    config = {"capacity": 4, "overflow": "drop"}
    assert check_bins([3, 10], target.bin([3, 10], config).bins, config) == [[(0, 0, 3)]]


def test_bug_worst_fit_uses_an_extra_bin() -> None:
    """Not best fit (what ms-swift's comment says it calls): the emptiest bin that fits. The
    smallest input where that costs a bin: [2, 2, 3, 4, 5] in 8: 3 bins, best fit (and the
    optimum) 2: 5 | 4 | then 3 joins the emptier 4 (7), 2 joins 5 (7), the last 2 opens a third
    bin. A user pays a pack of padding per such bin: 1 pack in 3 here, compute for nothing."""
    assert _tcv([2, 2, 3, 4, 5], 8) == [[4, 0], [3, 2], [1]]
    assert rb.optimum([2, 2, 3, 4, 5], rb.BinConfig(8)) == 2


def test_bug_empty_input_gives_an_empty_bin() -> None:
    """Bug (R-BIN-1, R-BIN-17): no items give one empty bin `[[]]`, a pack with no sequence.
    ms-swift guards against it (`if len(sequences) == 0: return [], []`); a direct user gets a
    micro-batch of zero tokens, which a THD packer cannot build (R-ERR-7)."""
    assert binpacking.to_constant_volume([], 4, weight_pos=1) == [[]]
    target = BinpackingToConstantVolume()
    with pytest.raises(RuleViolation, match="R-BIN-17"):
        check_bins([], target.bin([], {"capacity": 4}).bins, {"capacity": 4})


def test_bug_overlong_item_overfills_its_bin() -> None:
    """Bug (R-BIN-6, R-BIN-5): an item over V_max is neither refused nor dropped: it opens a bin
    of its own, over the volume. In a trainer that bin is a micro-batch longer than the memory
    was sized for: an out-of-memory step, or a silent truncation downstream."""
    assert _tcv([3, 10], 4) == [[1], [0]]
    target = BinpackingToConstantVolume()
    with pytest.raises(RuleViolation, match="R-BIN-5"):
        check_bins([3, 10], target.bin([3, 10], {"capacity": 4}).bins, {"capacity": 4})


def test_bug_bad_input_accepted() -> None:
    """Bug (R-BIN-1, R-BIN-2): a capacity of 0 or -1, a negative length and a fractional one
    are all accepted without a word; the negative length even makes room (3 + -5 <= 4)."""
    assert _tcv([3, 4], 0) == [[1], [0]]
    assert _tcv([3, 4], -1) == [[1], [0]]
    assert _tcv([3, -5, 4], 4) == [[2], [0, 1]]
    assert _tcv([3, 2.5], 4) == [[0], [1]]


def test_wiring_matches_the_wheel() -> None:
    assert _wiring.problems(WIRING) == []
