"""Bad batches (spec section 11): the container, its elements, mixed trailing shapes and dtypes,
and messages that show the offending values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given

import reference

from . import harness as h
from .rejection import BASE_CONFIG, compare_pack, names_one_of, two_sequences
from .strategies import (
    bad_batches,
)


def _bad_batch(kind: str) -> Any:
    good = two_sequences()
    return {
        "not-a-list": {0: good[0]},
        "empty": [],
        "list-element": [good[0], [1, 2, 3]],
        "scalar-element": [good[0], 3],
        "none-element": [None],
        "zero-dim": [np.array(5)],
        "trail-mismatch": [np.zeros((2, 3)), np.zeros((2, 4))],
        "dtype-mismatch": [np.zeros(2, np.int64), np.zeros(2, np.int32)],
        "tuple-ok": tuple(good),
        "ndarray-batch": np.zeros((2, 3)),
    }[kind]


@h.needs("batch_checks")
@pytest.mark.rules("R-IN-1", "R-ERR-1", "R-ERR-7", "R-ERR-9")
@h.prop_settings(0.5)
@given(bad_batches)
def test_reject_batch(kind: str) -> None:
    """Batch structure: not a list/tuple or a foreign element TypeError, empty ValueError,
    0-d or mixed trailing shapes ValueError, mixed dtypes TypeError."""
    compare_pack(_bad_batch(kind), BASE_CONFIG)


# (batch, what its error message must show): spec section 11, "the error message names the
# field and the offending value".
BATCH_MESSAGES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "not-a-container": ({0: np.zeros(2)}, ("batch|seqs", "dict")),
    "empty": ([], ("batch|seqs",)),
    "zero-dim-element": ([np.array(5)], ("batch|seqs",)),
    "trail-mismatch": ([np.zeros((2, 11)), np.zeros((3, 13))], ("11", "13")),
    "trail-rank": ([np.zeros((2, 11)), np.zeros((3, 11, 1))], ("11", "1")),
    "dtype-mismatch": ([np.zeros(2, np.int64), np.zeros(2, np.int32)], ("int64", "int32")),
    "list-element": ([np.zeros(2), [1.0, 2.0]], ("list",)),
    "str-element": ([np.zeros(2), "ab"], ("str",)),
}


@h.needs("batch_checks")
@pytest.mark.rules("R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("kind", sorted(BATCH_MESSAGES))
def test_batch_error_names_values(kind: str) -> None:
    """A batch with mixed trailing shapes or dtypes, or an element that is not an array: the
    reference's error class, and a message that shows the offending values (both trailing shapes,
    both dtypes, the element's type), not just that something is wrong."""
    seqs, shown = BATCH_MESSAGES[kind]
    want = h.outcome(lambda: reference.pack_thd(seqs, reference.PackConfig(), 0))
    got = h.outcome(lambda: h.target().pack(seqs, {}, 0))
    rules = {"R-ERR-1"} if isinstance(want, TypeError) else {"R-ERR-9"}
    h.check_same_rejection(want, got, f"pack({kind})", rules)
    missing = [s for s in shown if not (h.names_number(int(s), str(got)) if s.isdigit()
                                        else names_one_of(s, str(got)))]
    if missing:
        raise h.RuleViolation(f"pack({kind}): the message {str(got)!r} does not show {missing}",
                              rules)
