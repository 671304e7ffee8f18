"""Bad lengths given to plan (spec section 11): negative, beyond int32/int64, not a 1-D integer
sequence, narrow integer arrays whose sum does not fit their dtype."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import reference

from . import harness as h
from .rejection import length_rows
from .strategies import (
    bad_lengths,
)


@h.needs("plan")
@pytest.mark.rules("R-ERR-1", "R-ERR-6", "R-ERR-8")
@h.prop_settings(0.5)
@given(st.lists(st.just(4), min_size=0, max_size=3), bad_lengths, st.integers(0, 3))
def test_reject_lengths(good: list[int], bad: Any, where: int) -> None:
    """Lengths (capability `plan`): negative ValueError, above INT32_MAX ValueError, a
    non-integer TypeError; an empty list ValueError."""
    seqlens = good[:where] + [bad] + good[where:]
    assume(h.within_rows(length_rows(seqlens)))
    want = h.outcome(lambda: reference.plan_thd(seqlens, reference.PackConfig()))
    got = h.outcome(lambda: h.target().plan(seqlens, {}))
    h.check_same_rejection(want, got, f"plan({seqlens!r})")
    empty_want = h.outcome(lambda: reference.plan_thd([], reference.PackConfig()))
    h.check_same_rejection(empty_want, h.outcome(lambda: h.target().plan([], {})), "plan([])")


@h.needs("plan")
@pytest.mark.rules("R-ERR-1", "R-ERR-6", "R-ERR-8", "R-TOTAL-6")
@pytest.mark.parametrize("seqlens", [
    [2**63], [-(2**63) - 1], [4, 2**64], [-(2**63), 2**64], "44", None, {4},
    np.array([[4, 4]]), np.array([True, False]), np.array([4.0]), np.array([], np.int64),
    np.array([200, 100], np.uint8), np.array([40000, 40000], np.uint16),
    np.array([2**30, 2**30], np.int32), np.array([2**31 - 9, 8], np.int32),
], ids=["2^63", "-2^63-1", "2^64", "-2^63,2^64", "str", "None", "set", "2-D", "bool-array",
        "float-array", "empty-array", "uint8-sum-300", "uint16-sum-80000", "int32-sum-2^31",
        "int32-sum-int32max"])
def test_lengths_edges(seqlens: Any) -> None:
    """Lengths beyond int64, containers that are not a 1-D integer sequence (TypeError or
    ValueError naming seqlens), and narrow integer arrays whose sum does not fit their dtype
    (accepted with the reference's total, or rejected above INT32_MAX, never wrapped)."""
    h.require_rows(length_rows(seqlens), f"plan({seqlens!r})")
    want = h.outcome(lambda: reference.plan_thd(seqlens, reference.PackConfig()))
    got = h.outcome(lambda: h.target().plan(seqlens, {}))
    h.check_same_rejection(want, got, f"plan({seqlens!r})", names=("seqlens",))
    if want is None:
        problems = h.meta_mismatches(h.target().plan(seqlens, {}),
                                     reference.plan_thd(seqlens, reference.PackConfig()))
        assert not problems, "; ".join(problems)


@h.needs("plan")
@pytest.mark.rules("R-ERR-8")
@pytest.mark.parametrize("first", [7, 200])
def test_length_beyond_int64_is_named(first: int) -> None:
    """A length beyond int64 next to a valid one (capability `plan`): ValueError whose message
    shows that length, not its neighbour (spec section 11: the offending value)."""
    seqlens = [first, 2**64]
    h.require_rows(length_rows(seqlens), f"plan({seqlens!r})")
    got = h.outcome(lambda: h.target().plan(seqlens, {}))
    if not isinstance(got, ValueError):
        raise h.RuleViolation(f"plan({seqlens}): expected ValueError, got {got!r}", {"R-ERR-8"})
    if not h.names_number(2**64, str(got)):
        raise h.RuleViolation(f"plan({seqlens}): the message {str(got)!r} does not show 2**64",
                              {"R-ERR-8"})
