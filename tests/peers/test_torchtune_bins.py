"""torchtune 0.6.1's PackedDataset as a binner (thd_packing/peers/torchtune_bins.py), judged by
hand: a contract sweep, both modes against the reference bin for bin, and the bad-input
findings pinned against torchtune's own class (docs/findings/bins-torchtune.md)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import numpy as np
import pytest

pytest.importorskip("thd_packing.peers.torchtune_bins")
try:
    _DIST: Any = importlib.metadata.distribution("torchtune")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(_DIST is None, reason="torchtune is not installed "
                                "(install torchtune==0.6.1 --no-deps)")

from thd_packing.peers import _bins, torchtune_bins  # noqa: E402


@pytest.fixture(scope="module")
def packed() -> Any:
    return torchtune_bins.load_packed_module()[0].PackedDataset


def _config(target: Any, capacity: int) -> dict[str, Any]:
    config: dict[str, Any] = {"capacity": capacity, "algorithm": target.claims}
    if target.split:
        config["overflow"] = "split"
    return config


def test_the_code_comes_from_the_wheel(packed: Any) -> None:
    path = str(_DIST.locate_file("torchtune/datasets/_packed.py"))
    assert packed._pack.__code__.co_filename == path


@pytest.mark.parametrize("cls", torchtune_bins.TARGETS, ids=lambda c: c.name)
def test_contract_and_claim_hold_on_random_draws(cls: Any) -> None:
    """120 draws (0..40 examples, capacity 1..64; under wrapped, lengths up to three times the
    capacity): every contract check passes and the bins are the reference's, bin for bin."""
    target = cls()
    rng = np.random.default_rng(40)
    for done in range(120):
        lengths, capacity = _bins.draw(rng, big=done % 3 == 0)
        if target.split:
            lengths = [int(v) for v in rng.integers(1, 3 * capacity + 1, size=len(lengths))]
        config = _config(target, capacity)
        got = _bins.checked(target, lengths, config)
        assert got == _bins.reference(lengths, config)


@pytest.mark.parametrize("split", [False, True])
def test_seq_lens_describe_the_pieces(packed: Any, split: bool) -> None:
    """Each pack's `seq_lens` (less its padding entry) are its pieces' lengths in order: the
    boundaries the attention mask is built from match the bins."""
    rng = np.random.default_rng(41)
    for _ in range(100):
        capacity = int(rng.integers(1, 33))
        lengths = [int(v) for v in rng.integers(1, (3 if split else 1) * capacity + 1,
                                                  size=int(rng.integers(1, 20)))]
        ds, offsets = torchtune_bins.samples(lengths)
        out = packed(ds, max_seq_len=capacity, split_across_pack=split)
        for pack in out.packs:
            pieces = torchtune_bins.read_pack(pack, offsets)
            seq_lens = pack["seq_lens"].tolist()
            real = sum(p[2] for p in pieces)
            if real < capacity:
                assert seq_lens[-1] == capacity - real
                seq_lens = seq_lens[:-1]
            assert seq_lens == [p[2] for p in pieces]


def test_max_packs_drops_the_rest_silently(packed: Any) -> None:
    """Documented, not a bug: `max_packs` stops packing and the remaining examples are in no
    pack, with no report (R-BIN-18 has no cap on the bin count; the spec would call them lost).
    Three examples of 3 under max_seq_len 4 and max_packs 2: the third is gone."""
    ds, offsets = torchtune_bins.samples([3, 3, 3])
    out = packed(ds, max_seq_len=4, max_packs=2)
    assert [torchtune_bins.read_pack(p, offsets) for p in out.packs] == [
        [(0, 0, 3)], [(1, 0, 3)]]


def test_capacity_zero_crashes_when_splitting(packed: Any) -> None:
    """R-BIN-2: capacity 0 should be a ValueError. With `split_across_pack=True` it is a
    ZeroDivisionError (`x % max_seq_len` for the positions); a negative one a RuntimeError
    from torch. Without splitting, every non-empty sample is "too long", a ValueError by luck."""
    ds, _ = torchtune_bins.samples([3])
    with pytest.raises(ZeroDivisionError):
        packed(ds, max_seq_len=0, split_across_pack=True)
    with pytest.raises(RuntimeError):
        packed(ds, max_seq_len=-4, split_across_pack=True)
    with pytest.raises(ValueError, match="too long"):
        packed(ds, max_seq_len=0)


def test_capacity_true_is_taken_as_one(packed: Any) -> None:
    """R-BIN-2: a bool capacity is a TypeError; torchtune packs under `max_seq_len=True`."""
    ds, offsets = torchtune_bins.samples([1, 1])
    out = packed(ds, max_seq_len=True)
    assert [torchtune_bins.read_pack(p, offsets) for p in out.packs] == [
        [(0, 0, 1)], [(1, 0, 1)]]


def test_the_wiring_lists_every_parameter() -> None:
    from thd_packing.peers import _wiring

    assert _wiring.problems(torchtune_bins.WIRING) == []


@pytest.mark.parametrize("field", [{"cost": "rows", "pack": {}}, {"overflow": "truncate"},
                                   {"algorithm": "best_fit_decreasing"}, {"shuffle": True}])
def test_refuses_what_it_cannot_express(field: dict[str, Any]) -> None:
    """A field without a counterpart is a NotImplementedError naming it, never a silent no-op."""
    target = torchtune_bins.TARGETS[0]()
    with pytest.raises(NotImplementedError, match=next(iter(field))):
        target.bin(np.array([1, 2]), {"capacity": 4, **field})
