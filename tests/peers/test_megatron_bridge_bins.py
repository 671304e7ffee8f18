"""Megatron-Bridge 0.3.1's packed-SFT strategies as binners
(thd_packing/peers/megatron_bridge_bins.py), judged by hand: a contract sweep, first fit
decreasing against the reference, and each finding pinned against Megatron-Bridge's own
functions (docs/findings/bins-megatron-bridge.md)."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("thd_packing.peers.megatron_bridge_bins")
try:
    _DIST: Any = importlib.metadata.distribution("megatron-bridge")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(_DIST is None, reason="megatron-bridge is not installed "
                                "(install megatron-bridge==0.3.1 --no-deps)")

from thd_packing.peers import _bins  # noqa: E402
from thd_packing.peers import megatron_bridge_bins as mb  # noqa: E402


@pytest.fixture(scope="module")
def pu() -> Any:
    return mb.module()[0]


@pytest.fixture()
def seeded() -> Iterator[None]:
    state = np.random.get_state()
    yield
    np.random.set_state(state)


def _config(target: Any, capacity: int) -> dict[str, Any]:
    config: dict[str, Any] = {"capacity": capacity, "order": "placement"}
    if target.claims:
        config["algorithm"] = target.claims
    return config


def _lengths(bins: list[list[tuple[int, int, int]]]) -> list[list[int]]:
    return [[p[2] for p in b] for b in bins]


def test_the_code_comes_from_the_wheel(pu: Any) -> None:
    path = str(_DIST.locate_file(mb.PATH))
    assert pu.create_packing_strategy.__code__.co_filename == path


@pytest.mark.parametrize("cls", mb.TARGETS, ids=lambda c: c.name)
def test_contract_holds_on_random_draws(cls: Any, seeded: None) -> None:
    """200 non-empty draws (some lengths 0): every contract check but determinism passes;
    first fit decreasing makes the reference's bins length for length (bins in order, pieces
    in placement order), the examples of one length exchanged at random."""
    target = cls()
    rng = np.random.default_rng(40)
    np.random.seed(40)
    done = 0
    while done < 200:
        lengths, capacity = _bins.draw(rng, zero=done % 5 == 0, big=done % 3 == 0)
        if not lengths:
            continue  # test_no_examples_is_a_zero_division
        config = _config(target, capacity)
        got = _bins.checked(target, lengths, config, twice=False)
        if target.claims:
            assert _lengths(got) == _lengths(_bins.reference(lengths, config))
        done += 1


def test_same_input_other_bins(pu: Any, seeded: None) -> None:
    """R-BIN-18 fails: `fill_packing_strategy` hands the examples of one length to the bins
    that hold that length in a `np.random.permutation` order, and `first_fit_shuffle` shuffles
    with `np.random.shuffle`; neither is seeded by `prepare_packed_sequence_data`'s `seed`.
    Two examples of 2 tokens under capacity 2 land in either order. What a user loses: the
    packed .npy differs between two preparations of the same data (sizes equal under first fit
    decreasing; the bins themselves differ under the shuffle)."""
    target = mb.MegatronBridgeFFD()
    seen = set()
    for seed in range(20):
        np.random.seed(seed)
        out = target.bin(np.array([2, 2]), _config(target, 2)).bins
        seen.add(tuple(tuple(p[0] for p in b) for b in out))
    assert seen == {((0,), (1,)), ((1,), (0,))}
    shuffle = mb.MegatronBridgeFirstFitShuffle()
    sizes = set()
    for seed in range(20):
        np.random.seed(seed)
        out = shuffle.bin(np.array([3, 3, 2, 2, 2]), _config(shuffle, 6)).bins
        sizes.add(tuple(tuple(p[2] for p in b) for b in out))
    assert len(sizes) > 1


def test_an_overflowing_example_is_an_index_error(pu: Any) -> None:
    """R-BIN-6 wants a ValueError naming the example; `create_hist` indexes its counts with
    the length and raises IndexError. Megatron-Bridge's tokenizer path truncates to
    max_seq_length first, so only a caller of the packing utilities meets it."""
    data, _ = mb.dataset([3, 10])
    with pytest.raises(IndexError):
        pu.create_hist(data, 4)


def test_no_examples_is_a_zero_division(pu: Any) -> None:
    """R-BIN-1: no examples give no bins. `create_packing_strategy` divides by the number of
    bins for its metadata: ZeroDivisionError, a crash on a valid (empty) input."""
    with pytest.raises(ZeroDivisionError):
        pu.create_packing_strategy([0, 0, 0], 8, "first_fit_decreasing")


def test_bad_capacity(pu: Any) -> None:
    """R-BIN-2: capacity 0 is an IndexError (any example overflows `create_hist`'s counts) or,
    with only empty examples, a ZeroDivisionError; `True` is taken as 1."""
    data, _ = mb.dataset([0, 0])
    sequences, histogram = pu.create_hist(data, 0)
    with pytest.raises(ZeroDivisionError):
        pu.create_packing_strategy(histogram, 0, "first_fit_decreasing")
    data, offsets = mb.dataset([1])
    sequences, histogram = pu.create_hist(data, True)
    assignments, _ = pu.create_packing_strategy(histogram, True, "first_fit_decreasing")
    rows = pu.fill_packing_strategy(assignments, sequences, True, 0)
    assert [mb.read_row(r, offsets) for r in rows] == [[(0, 0, 1)]]


def test_an_example_without_ids_is_left_out_silently(pu: Any) -> None:
    """An example with no input_ids has length -1 in `create_hist`, which files it under key -1
    (and counts it in the last bucket, `counts[-1]`); the histogram reads keys 0..max, so it is
    in no pack and no error says so. No token is lost (it has none); the dataset's example
    count and the packed one disagree silently."""
    data = np.empty(2, dtype=object)
    data[:] = [{"input_ids": [], "loss_mask": []}, {"input_ids": [7, 8], "loss_mask": [1, 1]}]
    sequences, histogram = pu.create_hist(data, 4)
    assert sum(histogram) == 1 and len(sequences[-1]) == 1


def test_the_wiring_lists_every_parameter() -> None:
    from thd_packing.peers import _wiring

    assert _wiring.problems(mb.WIRING) == []


@pytest.mark.parametrize("field", [{"cost": "rows", "pack": {}}, {"overflow": "truncate"},
                                   {"algorithm": "best_fit_decreasing"}, {"shuffle": True}])
def test_refuses_what_it_cannot_express(field: dict[str, Any]) -> None:
    """A field without a counterpart is a NotImplementedError naming it, never a silent no-op."""
    target = mb.TARGETS[0]()
    with pytest.raises(NotImplementedError, match=next(iter(field))):
        target.bin(np.array([1, 2]), {"capacity": 4, **field})
