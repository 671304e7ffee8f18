"""verl 0.9.1's seqlen_balancing as binners (thd_packing/peers/verl_bins.py), judged by hand.

A sweep of random draws through the bin contract, Karmarkar-Karp against R-BIN-19 where no tie
can arise, and each bug pinned against verl's own function (docs/findings/bins-verl.md).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("thd_packing.peers.verl_bins")
try:
    _DIST: Any = importlib.metadata.distribution("verl")
except importlib.metadata.PackageNotFoundError:
    _DIST = None
pytestmark = pytest.mark.skipif(_DIST is None, reason="verl is not installed "
                                "(install verl==0.9.1 --no-deps)")

from thd_packing.peers import _bins, verl_bins  # noqa: E402
from thd_packing.reference import bins as rb  # noqa: E402


@pytest.fixture(scope="module")
def sb() -> Any:
    return verl_bins.module()[0]


def _config(target: Any, capacity: int) -> dict[str, Any]:
    config: dict[str, Any] = {"capacity": capacity}
    if next(iter(target.declared_bins.algorithms), None):
        config["algorithm"] = next(iter(target.declared_bins.algorithms), None)
    if target.declared_bins.order != "input":
        config["order"] = "placement"
    return config


def test_the_code_comes_from_the_wheel(sb: Any) -> None:
    path = str(_DIST.locate_file(verl_bins.PATH))
    assert sb.rearrange_micro_batches.__code__.co_filename == path
    assert sb.karmarkar_karp.__code__.co_filename == path


@pytest.mark.parametrize("cls", verl_bins.TARGETS, ids=lambda c: c.name)
def test_contract_holds_on_random_draws(cls: Any) -> None:
    """300 draws (1..40 examples, some of length 0, capacity 1..64, some min_bins and
    bins_multiple_of): every contract check passes, twice the same bins; a target claiming
    Karmarkar-Karp makes as many bins as R-BIN-15 on every draw (which ones differs on ties:
    test_ties_break_otherwise_than_r_bin_19)."""
    target = cls()
    rng = np.random.default_rng(40)
    done = 0
    while done < 300:
        lengths, capacity = _bins.draw(rng, zero=done % 5 == 0, big=done % 3 == 0)
        if sum(lengths) == 0:
            continue  # the all-empty batch: test_a_batch_without_tokens_crashes
        config = _config(target, capacity)
        if done % 7 == 0:
            config["min_bins"] = int(rng.integers(1, 4))
        if done % 11 == 0:
            config["bins_multiple_of"] = int(rng.integers(1, 4))
        try:
            ref = _bins.reference(lengths, config)
        except ValueError:  # min_bins / bins_multiple_of cannot be met: refused by both
            with pytest.raises(ValueError):
                target.bin(np.asarray(lengths, dtype=np.int64), config)
            done += 1
            continue
        got = _bins.checked(target, lengths, config)
        if next(iter(target.declared_bins.algorithms), None):
            assert len(got) == len(ref)
        done += 1


@pytest.mark.parametrize("cls", [verl_bins.VerlBalancedPartitions, verl_bins.VerlKarmarkarKarp],
                         ids=lambda c: c.name)
def test_karmarkar_karp_is_r_bin_15_where_no_tie_arises(cls: Any) -> None:
    """Distinct powers of two: no two sets, and no two states, ever tie, so the tie rules of
    R-BIN-19 step 2 and 3 are never read; verl's bins are then R-BIN-15's, bin for bin."""
    target = cls()
    rng = np.random.default_rng(41)
    for _ in range(200):
        n = int(rng.integers(1, 13))
        lengths = [int(1 << e) for e in rng.permutation(14)[:n]]
        capacity = int(rng.integers(max(lengths), sum(lengths) + 1))
        config = _config(target, capacity)
        got = _bins.checked(target, lengths, config)
        assert _bins.as_sets(got) == _bins.as_sets(_bins.reference(lengths, config))


def test_partition_matches_r_bin_19_where_no_tie_arises(sb: Any) -> None:
    """`get_seqlen_balanced_partitions` is R-BIN-19's `partition` on tie-free weights, with and
    without equal_size (R-BIN-20's rank split)."""
    rng = np.random.default_rng(42)
    for _ in range(200):
        n = int(rng.integers(1, 13))
        weights = [int(1 << e) for e in rng.permutation(14)[:n]]
        k = int(rng.integers(1, n + 1))
        equal = bool(n % k == 0 and rng.integers(2))
        assert sb.get_seqlen_balanced_partitions(weights, k, equal) == rb.partition(
            weights, k, equal)


def test_ties_break_otherwise_than_r_bin_19(sb: Any) -> None:
    """Not a bug (no token lost, the same sums): with three equal weights verl orders equal
    sets by their item lists, descending, where R-BIN-19 step 2 puts the smallest index
    first, so the parts differ from the reference's."""
    assert sb.get_seqlen_balanced_partitions([0, 0, 0], 2, False) == [[0, 1], [2]]
    assert rb.partition([0, 0, 0], 2) == [[1, 2], [0]]


def test_a_batch_without_tokens_crashes(sb: Any) -> None:
    """Bug: a batch whose examples all have 0 real tokens (attention mask all zero) gets
    `min(n, ceil(0 / max_token_len)) = 0` micro-batches, and Karmarkar-Karp on 0 parts is an
    IndexError. A user loses the step (the trainer stops); no tokens are at stake."""
    batch = {"input_ids": torch.zeros(1, 0, dtype=torch.long),
             "attention_mask": torch.zeros(1, 0, dtype=torch.long)}
    with pytest.raises(IndexError):
        sb.rearrange_micro_batches(batch, max_token_len=1)


def test_an_empty_batch_is_refused(sb: Any) -> None:
    """R-BIN-1 says no examples give no bins; verl raises ValueError("max() arg is an empty
    sequence") from its own bookkeeping. A rank handed no sequences cannot take part."""
    batch = {"input_ids": torch.zeros(0, 0, dtype=torch.long),
             "attention_mask": torch.zeros(0, 0, dtype=torch.long)}
    with pytest.raises(ValueError, match="empty sequence"):
        sb.rearrange_micro_batches(batch, max_token_len=8)


def test_an_overflowing_example_is_an_assertion(sb: Any) -> None:
    """R-BIN-6 wants a ValueError naming the example; verl asserts `max_token_len >= max_seq_len`
    (an AssertionError, gone under `python -O`, where the later forced-group check raises a
    ValueError instead). A caller catching ValueError misses it."""
    batch = {"input_ids": torch.zeros(2, 10, dtype=torch.long),
             "attention_mask": (torch.arange(10)[None] < torch.tensor([[3], [10]])).long()}
    with pytest.raises(AssertionError, match="max_token_len must be greater"):
        sb.rearrange_micro_batches(batch, max_token_len=4)


def test_capacity_zero_and_bool_are_not_refused_as_r_bin_2_says(sb: Any) -> None:
    """R-BIN-2: a capacity below 1 is a ValueError, a bool a TypeError. verl: capacity 0 is an
    AssertionError (a ZeroDivisionError if every example is empty) and `True` is taken as 1."""
    mask = torch.ones(1, 1, dtype=torch.long)
    batch = {"input_ids": torch.zeros_like(mask), "attention_mask": mask}
    with pytest.raises(AssertionError):
        sb.rearrange_micro_batches(batch, max_token_len=0)
    _, bins = sb.rearrange_micro_batches(batch, max_token_len=True)
    assert bins == [[0]]


def test_partitioners_take_negative_and_fractional_weights(sb: Any) -> None:
    """R-BIN-1 fails for the partitioners used as binners: a negative length is taken and
    offsets a long one, so a bin of 10 + (-5) = 5 "tokens" holds a 10-token example under a
    capacity of 8 (OOM risk if a caller's lengths could be negative; verl's own callers pass
    attention-mask sums, never negative). Fractional weights pass silently too."""
    assert sb.get_seqlen_balanced_partitions([10, -5], 1, False) == [[0, 1]]
    assert sb.karmarkar_karp([1.5, 2.5], 1, False) == [[1, 0]]
    assert sb.greedy_partition([10, -5], 1, False) == [[0, 1]]


def test_zero_parts_is_an_index_error(sb: Any) -> None:
    """`k_partitions=0` (what the count rule gives for no tokens) crashes inside the heap walk
    rather than being refused."""
    with pytest.raises(IndexError):
        sb.get_seqlen_balanced_partitions([], 0, False)


def test_the_wiring_lists_every_parameter() -> None:
    from thd_packing.peers import _wiring

    assert _wiring.problems(verl_bins.WIRING) == []


@pytest.mark.parametrize("field", [{"cost": "rows", "pack": {}}, {"overflow": "truncate"},
                                   {"algorithm": "best_fit_decreasing"}, {"shuffle": True}])
def test_refuses_what_it_cannot_express(field: dict[str, Any]) -> None:
    """A field without a counterpart is a NotImplementedError naming it, never a silent no-op."""
    target = verl_bins.TARGETS[0]()
    with pytest.raises(NotImplementedError, match=next(iter(field))):
        target.bin(np.array([1, 2]), {"capacity": 4, **field})
