"""axolotl 0.19's MultipackBatchSampler as a binner (thd_packing/peers/axolotl_bins.py).

(a) Random lengths through the contract and against the algorithm each mode claims:
`sequential=True` next fit (it is, bin for bin); the default claims first fit decreasing and
is first fit in the sampler's order, bin for bin. (b) Each real bug pinned against the wheel's
own sampler and `pack_group`.
"""

from __future__ import annotations

import importlib.metadata
import random

import numpy as np
import pytest

pytest.importorskip("numba")
torch = pytest.importorskip("torch")
try:
    importlib.metadata.distribution("axolotl")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("axolotl is not installed (the `bins` extra)", allow_module_level=True)

from thd_packing.conformance.bins_contract import check_bins  # noqa: E402
from thd_packing.conformance.buffer import RuleViolation  # noqa: E402
from thd_packing.peers import _wiring  # noqa: E402
from thd_packing.peers.axolotl_bins import WIRING, AxolotlMultipack, AxolotlSequential  # noqa: E402
from thd_packing.reference import bins as rb  # noqa: E402


@pytest.fixture(scope="module")
def multipack() -> AxolotlMultipack:
    return AxolotlMultipack()


def _sets(bins: list[list[tuple[int, int, int]]]) -> list[list[tuple[int, int, int]]]:
    return [sorted(tuple(p) for p in b) for b in bins]


def test_contract_and_algorithms(multipack: AxolotlMultipack) -> None:
    """300 draws of lengths 0..capacity per mode: the contract holds; sequential is the
    reference's next fit and the default the reference's first fit (input order), bin for bin,
    and it uses more bins than the first fit decreasing it claims now and then."""
    sequential = AxolotlSequential()
    rng = random.Random(11)
    more = 0
    for _ in range(300):
        capacity = rng.randint(1, 24)
        lengths = [rng.randint(0, capacity) for _ in range(rng.randint(0, 14))]
        array = np.asarray(lengths, dtype=np.int64)
        for target, algorithm, same_as in ((multipack, "first_fit_decreasing", "first_fit"),
                                           (sequential, "sequential", "sequential")):
            config = {"capacity": capacity, "algorithm": algorithm}
            got = check_bins(lengths, target.bin(array, config).bins, config)
            ref = rb.bin_lengths(lengths, rb.BinConfig(capacity, algorithm=same_as))
            assert _sets(got) == _sets(ref.bins), (lengths, capacity, algorithm)
            if algorithm == "first_fit_decreasing":
                more += len(got) > len(rb.bin_lengths(lengths, rb.as_config(config)).bins)
    assert more > 0


def test_bug_first_fit_decreasing_is_first_fit(multipack: AxolotlMultipack) -> None:
    """Bug: pack_group's docstring says first fit decreasing, and nothing sorts: the sampler
    hands it the lengths in sampler order. Smallest input costing a bin: [3, 4, 6, 7] into 10:
    3 bins (3 + 4, 6, 7) where first fit decreasing (and the optimum) make 2 (7 + 3, 6 + 4).
    A user trains on more packs than needed: a step more in every few, each padded to
    sequence_len."""
    pack_group = multipack.module.pack_group
    bins = pack_group(np.array([3, 4, 6, 7], dtype=np.int32), 0, 10, 4, 200, True)
    assert [list(b) for b in bins] == [[0, 1], [2], [3]]
    assert rb.optimum([3, 4, 6, 7], rb.BinConfig(10)) == 2


def test_bug_random_sampler_drops_examples(multipack: AxolotlMultipack) -> None:
    """Bug (R-BIN-18): with the default RandomSampler, `__len__` packs 4 shuffles and keeps the
    fewest batches; `__iter__` cuts every epoch's batches to that count, so an epoch whose
    shuffle packs into one bin more loses that bin's examples, silently. [3, 4, 6, 7] into 10
    packs in 2 or 3 bins by order: over 5 epochs (seed 0), 3 lose an example. At scale a few
    packs an epoch: their examples are never trained on in that epoch."""
    lengths = np.array([3, 4, 6, 7])
    sampler = multipack.sampler_class(
        torch.utils.data.RandomSampler(range(4), generator=torch.Generator().manual_seed(0)),
        batch_size=1, batch_max_len=10, lengths=lengths, bin_size=200, drop_last=True)
    assert len(sampler) == 2
    lost = []
    for epoch in range(5):
        sampler.set_epoch(epoch)
        lost.append(4 - sum(len(b) for batch in sampler for b in batch))
    assert lost == [1, 0, 1, 1, 0]


@pytest.mark.parametrize("cls", [AxolotlMultipack, AxolotlSequential])
def test_bug_overlong_example_overfills_its_bin(cls: type[AxolotlMultipack]) -> None:
    """Bug (R-BIN-6, R-BIN-5): an example over batch_max_len opens a bin of its own, over the
    capacity (its remaining space goes negative). axolotl's data preparation drops, truncates or
    refuses examples over sequence_len (excess_length_strategy, "drop" by default); with
    batch_max_len = micro_batch_size * sequence_len nothing is over it, but a direct user of
    the sampler, or a dataset prepared with another sequence_len, gets an over-long
    micro-batch: an OOM risk."""
    config = {"capacity": 4}
    with pytest.raises(RuleViolation, match="R-BIN-5"):
        check_bins([3, 10], cls().bin(np.array([3, 10]), config).bins, config)


def test_bug_bad_input_accepted(multipack: AxolotlMultipack) -> None:
    """Bug (R-BIN-1, R-BIN-2): capacity 0 is taken (every example alone, each bin over it);
    a fractional length is cast to int32 (2.9 counts as 2 tokens) and a negative one makes
    room: 9 and 6 share a bin of 10."""
    assert multipack.bin(np.array([3, 2]), {"capacity": 0}).bins == [[0], [1]]
    assert multipack.bin(np.array([2.9, 8.0]), {"capacity": 10}).bins == [[0, 1]]
    assert multipack.bin(np.array([9, -5, 6]), {"capacity": 10}).bins == [[0, 1, 2]]


def test_wiring_matches_the_wheel() -> None:
    assert _wiring.problems(WIRING) == []
