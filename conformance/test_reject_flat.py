"""Flat values with lengths= (capability `flat_batch_checks`, spec section 11): lengths that
contradict the values, and values that are not one array."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import reference

from . import harness as h
from .rejection import BASE_CONFIG, names_one_of
from .strategies import (
    INT32_MAX,
)

# Flat values [rows, *trail] with lengths= (capability `flat_batch_checks`): (lengths, rows,
# trail). The reference has no flat form; where plan_thd rejects the lengths alone, its error
# class is the expected one, and lengths that do not sum to the rows are a ValueError (a shape
# that contradicts the lengths, as R-ERR-9's mismatched shapes).
FLAT_FAULTS: dict[str, tuple[Any, int, tuple[int, ...]]] = {
    "sum-short": ([3, 4], 8, ()),
    "sum-long": ([3, 9], 8, ()),
    "sum-short-trail": ([3, 4], 8, (3,)),
    "sum-long-trail": ([5, 6], 8, (2, 2)),
    "sum-tensor": (np.array([3, 4], np.int64), 8, (3,)),
    "negative": ([9, -1], 8, ()),
    "negative-tensor": (np.array([9, -1], np.int32), 8, (3,)),
    "float-list": ([4.0, 4], 8, ()),
    "float-tensor": (np.array([4.0, 4.0]), 8, ()),
    "bool-list": ([True] * 8, 8, ()),
    "bool-tensor": (np.ones(8, bool), 8, ()),
    "str": ("44", 8, ()),
    "2-D": (np.array([[4, 4]]), 8, ()),
    "empty-list": ([], 0, ()),
    "empty-tensor": (np.array([], np.int64), 0, (3,)),
    "above-int32": ([INT32_MAX + 1, -(INT32_MAX + 1) + 8], 8, ()),
}


def _flat_expected(lengths: Any, rows: int) -> tuple[type[BaseException], set[str]]:
    """The spec's error class for flat values with these lengths, and the rule it enforces."""
    want = h.outcome(lambda: reference.plan_thd(lengths, reference.PackConfig()))
    if isinstance(want, TypeError):
        return TypeError, {"R-ERR-1"}
    if want is not None:
        return type(want), {"R-ERR-6", "R-ERR-7", "R-ERR-8"}
    assert sum(int(n) for n in lengths) != rows, "not a fault"
    return ValueError, {"R-IN-1", "R-ERR-9"}


@h.needs("flat_batch_checks")
@pytest.mark.rules("R-IN-1", "R-ERR-1", "R-ERR-6", "R-ERR-7", "R-ERR-8", "R-ERR-9")
@pytest.mark.parametrize("kind", sorted(FLAT_FAULTS))
def test_reject_flat_lengths(kind: str) -> None:
    """Flat values with bad `lengths=`: not summing to the rows (with and without trailing
    dims), negative, non-integer or bool, 2-D, empty, above INT32_MAX. The spec's error class,
    a message naming `lengths` (as written: case matters) and, for a sum or a negative length,
    the offending number; values and lengths unchanged."""
    lengths, rows, trail = FLAT_FAULTS[kind]
    values = np.arange(rows * int(np.prod(trail)), dtype=np.int64).reshape(rows, *trail)
    expected, rules = _flat_expected(lengths, rows)
    before = h.snapshot([values, lengths])
    got = h.outcome(lambda: h.target().pack_flat(values, lengths, dict(BASE_CONFIG), 0))
    what = f"pack_flat(values {values.shape}, lengths={lengths!r})"
    if h.snapshot([values, lengths]) != before:
        raise h.RuleViolation(f"{what}: the call changed its inputs", {"R-ERR-1"})
    if not isinstance(got, expected):
        raise h.RuleViolation(f"{what}: expected {expected.__name__}, got {got!r}", rules)
    message = str(got)
    if not h._names("lengths", message):
        raise h.RuleViolation(f"{what}: the message {message!r} does not name 'lengths'", rules)
    if kind.startswith("sum") and not h.names_number(rows, message):
        raise h.RuleViolation(f"{what}: the message {message!r} does not report the {rows} "
                              "rows the lengths contradict (spec section 11: the value)", rules)
    if kind == "str" and not h._names("str", message):
        raise h.RuleViolation(f"{what}: the message {message!r} does not name the type it got "
                              "(str)", rules)
    if kind.startswith("negative") and not h.names_number(-1, message):
        raise h.RuleViolation(f"{what}: the message {message!r} does not name the length -1",
                              rules)


@h.needs("flat_batch_checks")
@pytest.mark.rules("R-IN-1", "R-ROW-1")
def test_flat_lengths_accepted() -> None:
    """The look-alikes of the faults above are accepted: lengths as a list, as an int32 array,
    with NumPy integers and a zero length, each giving the reference's rows for the split batch
    (so the rejections above are not a target that rejects every flat batch)."""
    values = np.arange(24, dtype=np.int64).reshape(8, 3)
    seqs = [values[:3], values[3:3], values[3:]]
    want, _, _ = reference.pack_thd(seqs, reference.PackConfig(**BASE_CONFIG), 1)
    for lengths in ([3, 0, 5], np.array([3, 0, 5], np.int32), [np.int64(3), 0, np.int16(5)]):
        rows, _, _ = h.target().pack_flat(values, lengths, dict(BASE_CONFIG), 1)
        assert h.same_value(np.asarray(rows), want), f"lengths={lengths!r}: rows differ"


# Flat values that are not one array [rows, *trail] (capability `flat_batch_checks`): a list of
# arrays with lengths= is TypeError naming lengths and the type; 0-d values are ValueError
# naming the batch (spec section 11: the field and the value).
FLAT_VALUES: dict[str, tuple[Any, Any, type[BaseException], tuple[str, ...]]] = {
    "list-with-lengths": ([np.zeros(2), np.zeros(3)], [2, 3], TypeError, ("lengths", "list")),
    "zero-dim-values": (np.array(5), [1], ValueError, ("batch|values",)),
}


@h.needs("flat_batch_checks")
@pytest.mark.rules("R-IN-1", "R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("kind", sorted(FLAT_VALUES))
def test_reject_flat_values(kind: str) -> None:
    """lengths= belongs to one flat array: with a list of arrays it is a TypeError (not an
    AttributeError from inside), with 0-d values a ValueError; both name what is wrong."""
    values, lengths, expected, shown = FLAT_VALUES[kind]
    got = h.outcome(lambda: h.target().pack_flat(values, lengths, dict(BASE_CONFIG), 0))
    rules = {"R-ERR-1"} if expected is TypeError else {"R-ERR-9"}
    if not isinstance(got, expected):
        raise h.RuleViolation(f"pack_flat({kind}): expected {expected.__name__}, got {got!r}",
                              rules)
    missing = [w for w in shown if not names_one_of(w, str(got))]
    if missing:
        raise h.RuleViolation(f"pack_flat({kind}): the message {str(got)!r} does not name "
                              f"{missing}", rules)
