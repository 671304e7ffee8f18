"""LLaMA-Factory 0.9.5's packed supervised processor as a binner
(thd_packing/peers/llamafactory_bins.py), judged by hand.

(a) Random lengths through the contract under overflow="drop" (it drops examples over
cutoff_len); it claims no spec algorithm, and its packs are first fit decreasing's by length.
(b) Each real bug pinned against the wheel's own `greedy_knapsack`.
"""

from __future__ import annotations

import importlib.metadata
import random

import pytest

try:
    importlib.metadata.distribution("llamafactory")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llamafactory is not installed (the `bins` extra)", allow_module_level=True)

from thd_packing.conformance.bins_contract import check_bins  # noqa: E402
from thd_packing.peers import _wiring  # noqa: E402
from thd_packing.peers.llamafactory_bins import (  # noqa: E402
    WIRING,
    LlamaFactoryNeatPacking,
    LlamaFactoryPacking,
)
from thd_packing.reference import bins as rb  # noqa: E402


@pytest.fixture(scope="module", params=[LlamaFactoryPacking, LlamaFactoryNeatPacking])
def target(request: pytest.FixtureRequest) -> LlamaFactoryPacking:
    return request.param()  # type: ignore[no-any-return]


def test_contract_and_first_fit_decreasing_by_length(target: LlamaFactoryPacking) -> None:
    """300 draws, some examples over the capacity (dropped): the contract holds, and every
    pack holds the lengths first fit decreasing's pack holds (the examples of equal length
    may differ: it takes the last of them first)."""
    rng = random.Random(5)
    for _ in range(300):
        capacity = rng.randint(1, 24)
        lengths = [rng.randint(1, capacity + 6) for _ in range(rng.randint(0, 14))]
        config = {"capacity": capacity, "overflow": "drop", "order": "placement"}
        got = check_bins(lengths, target.bin(lengths, config).bins, config)
        ref = rb.bin_lengths(lengths, rb.as_config(config))
        assert [sorted(p[2] for p in b) for b in got] == [sorted(p.length for p in b)
                                                         for b in ref.bins]


class _Stop(Exception):
    pass


class _Counted(list):  # type: ignore[type-arg]
    """A list that stops the loop after `limit` length checks (greedy_knapsack's `while
    numbers:` and bisect both ask for it), so that an endless loop ends in a test."""

    limit = 10_000

    def __len__(self) -> int:
        self.limit -= 1
        if self.limit < 0:
            raise _Stop
        return super().__len__()


def test_bug_overlong_number_loops_forever(target: LlamaFactoryPacking) -> None:
    """Bug (R-BIN-6): greedy_knapsack([5], 4) never returns: no number fits, an empty knapsack
    is appended and the loop goes round again, growing the list until memory runs out. The
    processor drops examples over cutoff_len first, so its own path never meets it; any other
    caller of the helper (a custom processor) hangs the preprocessing and eats the host's
    memory. Capacity 0 with any non-empty example does the same."""
    for numbers, capacity in (([5], 4), ([1], 0)):
        with pytest.raises(_Stop):
            target.utils.greedy_knapsack(_Counted(numbers), capacity)


def test_bug_capacity_zero_drops_everything(target: LlamaFactoryPacking) -> None:
    """Bug (R-BIN-2): cutoff_len 0 (or below) is taken: every example is "lengthy" and dropped
    with a warning, and the dataset packs to nothing."""
    assert target.bin([3, 2], {"capacity": 0}).bins == []


def test_greedy_knapsack_consumes_its_argument(target: LlamaFactoryPacking) -> None:
    """Not a bug of the bins: greedy_knapsack sorts and empties the list it is given."""
    numbers = [3, 1, 2]
    assert target.utils.greedy_knapsack(numbers, 4) == [[3, 1], [2]]
    assert numbers == []


def test_wiring_matches_the_wheel() -> None:
    assert _wiring.problems(WIRING) == []
