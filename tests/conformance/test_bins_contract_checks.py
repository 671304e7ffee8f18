"""Each bin contract check (conformance/bins_contract.py) passes the reference's bins and fails,
naming its rule, on bins broken the way a binner breaks them."""

from __future__ import annotations

from typing import Any

import pytest

from thd_packing.conformance import bins_contract as bc
from thd_packing.conformance.under_test import RuleViolation, TargetError
from thd_packing.reference import bins as rb

LENGTHS = [4, 7, 2, 5, 3, 2, 12]
CONFIG: dict[str, Any] = {"capacity": 10, "overflow": "split"}


def _good(config: dict[str, Any] = CONFIG) -> tuple[list[list[list[int]]], list[str]]:
    out = rb.bin_lengths(LENGTHS, rb.as_config(dict(config)))
    return [[list(p) for p in b] for b in out.bins], out.fates


def _rule(call: Any) -> str:
    with pytest.raises(RuleViolation) as info:
        call()
    (rule,) = info.value.rules
    return rule


def test_reference_bins_pass_every_check() -> None:
    for config in (CONFIG, {"capacity": 10, "overflow": "truncate"},
                   {"capacity": 10, "overflow": "drop", "bins_multiple_of": 2},
                   {"capacity": 10, "algorithm": "wrapped", "overflow": "split"},
                   {"capacity": 32, "cost": "rows", "overflow": "split",
                    "pack": {"tp_size": 2, "cp_size": 2}}):
        bins, fates = _good(config)
        assert bc.check_bins(LENGTHS, bins, config, fates, again=bins)


def test_indices_stand_for_whole_examples() -> None:
    config = {"capacity": 40}
    bins = [list(b) for b in rb.bin_lengths(LENGTHS, rb.as_config(config)).indices()]
    assert bc.check_bins(LENGTHS, bins, config)[0][0][2] == LENGTHS[bins[0][0]]


def test_lost_token() -> None:
    """A split example's last piece missing looks truncated: under overflow="split", R-BIN-8;
    a piece missing from the middle leaves a gap: R-BIN-18."""
    bins, _ = _good()
    tail = [[p for p in b if p != [6, 10, 2]] for b in bins]
    assert _rule(lambda: bc.check_bins(LENGTHS, tail, CONFIG)) == "R-BIN-8"
    gap = [[p for p in b if p[:2] != [6, 0]] for b in bins]
    assert _rule(lambda: bc.check_bins(LENGTHS, [b for b in gap if b], CONFIG)) == "R-BIN-18"


def test_duplicated_example() -> None:
    bins, _ = _good()
    bins[0].append([1, 0, 7])
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, CONFIG)) == "R-BIN-18"


def test_overflowing_bin() -> None:
    bins, _ = _good()
    bins = [bins[0] + bins[1], *bins[2:]]
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, CONFIG)) == "R-BIN-5"


def test_overflowing_bin_in_rows() -> None:
    """Within 10 tokens, over 16 rows: 4 + 2 + 3 tokens align to 8 + 8 + 8 under tp = cp = 2."""
    config = {"capacity": 16, "cost": "rows", "pack": {"tp_size": 2, "cp_size": 2}}
    assert _rule(lambda: bc.check_capacity([4, 2, 3], [[(0, 0, 4), (1, 0, 2), (2, 0, 3)]],
                                           config)) == "R-BIN-5"


def test_split_without_declaration() -> None:
    """An overflowing example cut under overflow="truncate" (R-BIN-7 keeps one prefix)."""
    bins, _ = _good()
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, {"capacity": 10,
                                                      "overflow": "truncate"})) == "R-BIN-7"


def test_fitting_example_cut() -> None:
    """Example 1 (7 tokens) fits alone, cut in two by a binner that is not `wrapped`."""
    bins, _ = _good()
    bins = [[p for p in b if p[0] != 1] for b in bins] + [[[1, 0, 3]], [[1, 3, 4]]]
    assert _rule(lambda: bc.check_accounting(LENGTHS, bc.read_bins(bins, LENGTHS),
                                             CONFIG)) == "R-BIN-18"


def test_silent_drop() -> None:
    """An overflowing example left out under overflow="split" (R-BIN-8) or "reject" (R-BIN-6:
    it should have raised)."""
    bins, _ = _good()
    bins = [[p for p in b if p[0] != 6] for b in bins]
    bins = [b for b in bins if b]
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, CONFIG)) == "R-BIN-8"
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, {"capacity": 10})) == "R-BIN-6"
    assert bc.check_bins(LENGTHS, bins, {"capacity": 10, "overflow": "drop"})


def test_reported_fates_disagree() -> None:
    bins, fates = _good()
    fates[6] = "whole"
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, CONFIG, fates)) == "R-BIN-18"


def test_empty_bin_and_counts() -> None:
    bins, _ = _good()
    assert _rule(lambda: bc.check_bins(LENGTHS, [*bins, []], CONFIG)) == "R-BIN-17"
    odd = {**CONFIG, "bins_multiple_of": len(bins) + 1}
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, odd)) == "R-BIN-17"
    many = {**CONFIG, "min_bins": len(bins) + 1}
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, many)) == "R-BIN-17"


def test_order() -> None:
    bins, _ = _good()
    longest = max(range(len(bins)), key=lambda k: len(bins[k]))
    bins[longest] = bins[longest][::-1]
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, CONFIG)) == "R-BIN-16"
    assert bc.check_bins(LENGTHS, bins, {**CONFIG, "order": "placement"})


def test_nondeterministic() -> None:
    bins, _ = _good()
    assert _rule(lambda: bc.check_bins(LENGTHS, bins, CONFIG, again=bins[::-1])) == "R-BIN-18"


@pytest.mark.parametrize("bins", ["abc", [1, 2], [[1.5]], [[(0, 0)]], [[99]], None])
def test_unreadable_output(bins: Any) -> None:
    with pytest.raises(TargetError):
        bc.read_bins(bins, LENGTHS)
