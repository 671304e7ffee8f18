"""ms-swift 4.6's packing as a binner (thd_packing/peers/ms_swift_bins.py), judged by hand.

(a) Random lengths through the contract, and against the reference algorithm each strategy
claims: "binpack" best fit decreasing (its comment), "sequential" next fit. (b) Each real bug
pinned against ms-swift's own `calculate_matched_group` from the wheel.
"""

from __future__ import annotations

import importlib.metadata
import random

import pytest

pytest.importorskip("binpacking")
try:
    importlib.metadata.distribution("ms-swift")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("ms-swift is not installed (the `bins` extra)", allow_module_level=True)

from thd_packing.conformance.bins_contract import check_bins  # noqa: E402
from thd_packing.conformance.buffer import RuleViolation  # noqa: E402
from thd_packing.peers import _wiring  # noqa: E402
from thd_packing.peers.ms_swift_bins import WIRING, MsSwiftBinpack, MsSwiftSequential  # noqa: E402
from thd_packing.reference import bins as rb  # noqa: E402

DRAWS = 60  # a worker process per call


@pytest.fixture(scope="module")
def binpack() -> MsSwiftBinpack:
    return MsSwiftBinpack()


@pytest.fixture(scope="module")
def sequential() -> MsSwiftSequential:
    return MsSwiftSequential()


def _group(target: MsSwiftBinpack | MsSwiftSequential, lengths: list[int], capacity: int,
           strategy: str) -> list[list[int]]:
    """ms-swift's own calculate_matched_group on (index, length) items, one finished batch."""
    calc = target.packing_dataset.create_packed_idx.__globals__["calculate_matched_group"]
    packs, rest = calc(list(enumerate(lengths)), capacity, is_finished=True, strategy=strategy)
    assert rest == []
    return [[i for i, _ in pack] for pack in packs]


def _draws(seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(DRAWS):
        capacity = rng.randint(1, 24)
        out.append(([rng.randint(1, capacity) for _ in range(rng.randint(0, 14))], capacity))
    return out


def test_binpack_contract_holds_but_it_is_not_best_fit(binpack: MsSwiftBinpack) -> None:
    """Lengths that fit: the contract holds. Against best fit decreasing, which it claims,
    the bins differ in many draws and their count is never lower (worst fit decreasing)."""
    differ = 0
    for lengths, capacity in _draws(1):
        config = {"capacity": capacity, "algorithm": "best_fit_decreasing",
                  "order": "placement"}
        got = check_bins(lengths, binpack.bin(lengths, config).bins, config)
        ref = rb.bin_lengths(lengths, rb.as_config(config)).bins
        assert len(got) >= len(ref)
        differ += sorted(sorted(b) for b in got) != sorted(sorted(tuple(p) for p in b)
                                                            for b in ref)
    assert differ > DRAWS // 10


def test_sequential_is_next_fit_on_positive_lengths(sequential: MsSwiftSequential) -> None:
    for lengths, capacity in _draws(2):
        config = {"capacity": capacity, "algorithm": "sequential", "order": "input"}
        got = check_bins(lengths, sequential.bin(lengths, config).bins, config)
        ref = rb.bin_lengths(lengths, rb.as_config(config)).bins
        assert got == [[tuple(p) for p in b] for b in ref], (lengths, capacity)


def test_bug_binpack_claims_best_fit_runs_worst_fit(binpack: MsSwiftBinpack) -> None:
    """Bug: "default: best-fit-decreasing bin packing", says the comment above the call, but
    binpacking.to_constant_volume puts each item into the emptiest bin that fits. Smallest
    input costing a pack: [2, 2, 3, 4, 5] into 8: 3 packs where best fit (and the optimum) make
    2. A user trains on a pack more per such group: up to a third more steps here, each padded
    to the packing length."""
    assert _group(binpack, [2, 2, 3, 4, 5], 8, "binpack") == [[4, 0], [3, 2], [1]]
    ref = rb.bin_lengths([2, 2, 3, 4, 5], rb.BinConfig(8, algorithm="best_fit_decreasing"))
    assert len(ref.bins) == 2


@pytest.mark.parametrize("strategy", ["binpack", "sequential"])
def test_bug_overlong_example_overfills_its_pack(binpack: MsSwiftBinpack,
                                                 strategy: str) -> None:
    """Bug (R-BIN-6, R-BIN-5): an example longer than packing_length gets a pack of its own,
    over the length. Reached when `--packing_length` is set below the template's max_length
    (examples are cut at max_length only): each such pack is longer than the memory was
    sized for, an out-of-memory risk on the longest step."""
    assert _group(binpack, [3, 10], 4, strategy) in ([[1], [0]], [[0], [1]])
    config = {"capacity": 4}
    target = binpack if strategy == "binpack" else MsSwiftSequential()
    with pytest.raises(RuleViolation, match="R-BIN-5"):
        check_bins([3, 10], target.bin([3, 10], config).bins, config)


def test_bug_sequential_empty_example_opens_an_empty_pack(binpack: MsSwiftBinpack) -> None:
    """Bug (R-BIN-13): "sequential" closes a pack as soon as it is full, so an empty example
    after a full pack opens a pack of zero tokens, where next fit puts it into the open pack.
    Smallest input: [4, 0] into 4 gives [[0], [1]]. A pack of no tokens is a micro-batch a
    THD packer cannot build (R-ERR-7) or a step of nothing."""
    assert _group(binpack, [4, 0], 4, "sequential") == [[0], [1]]
    ref = rb.bin_lengths([4, 0], rb.BinConfig(4, algorithm="sequential"))
    assert ref.indices() == [[0, 1]]


def test_bug_bad_capacity_accepted(binpack: MsSwiftBinpack) -> None:
    """Bug (R-BIN-2): a packing length of 0 or -1 is taken: every example in a pack of its own,
    each over it. (PackingDataset turns 0 into the template's max_length, `packing_length or
    template.max_length`; a -1 goes through.)"""
    assert _group(binpack, [3, 4], 0, "binpack") == [[1], [0]]
    assert _group(binpack, [3, 4], -1, "sequential") == [[0], [1]]


def test_wiring_matches_the_wheel() -> None:
    assert _wiring.problems(WIRING) == []
