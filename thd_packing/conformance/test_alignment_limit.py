"""Alignments at and past INT32_MAX (capability `plan`): an alignment of exactly INT32_MAX with
one row gives the total INT32_MAX, which R-TOTAL-6 allows; an alignment past it is harmless
while every sequence is empty (the total is 0); with a sequence of length 1 it is a total past
INT32_MAX, rejected (R-ERR-8) however the target's fixed-width arithmetic would wrap it."""

from __future__ import annotations

from typing import Any

import pytest

from thd_packing import reference

from .under_test import RuleViolation, declined_by, require, target

CASES = [
    ({"tp_size": 2**31 - 1}, [1]),
    ({"tp_size": 2**31 - 1}, [1, 1]),  # A = INT32_MAX: two sequences are a total of 2 * A
    ({"tp_size": 2**31}, [0]),
    ({"tp_size": 2**31, "cp_size": 2**31}, [1]),  # A = 2**63: int64 wraps to a total of 0
    ({"tp_size": 2**62, "cp_size": 2}, [0, 0]),  # A = 2**63, empty: total 0, no int64 overflow
    ({"tp_size": 2**63}, [0]),  # A past int64, empty: total 0 (not a wrapped -2**63)
]


@pytest.mark.rules("R-TOTAL-4", "R-TOTAL-6", "R-ERR-8")
@pytest.mark.parametrize("config,lengths", CASES, ids=[
    "A-int32-max", "A-int32-max-two", "A-past-empty", "A-2pow63", "A-2pow63-empty",
    "A-past-int64-empty"])
def test_plan_at_the_alignment_limit(config: dict[str, Any], lengths: list[int]) -> None:
    """The plan's total is the reference's, or a ValueError where the reference rejects."""
    require("plan", "zero_length", *declined_by(lengths=lengths))
    what = f"plan({lengths}, config={config})"
    try:
        want: int | None = reference.plan_thd(lengths, reference.PackConfig(**config)).total
    except ValueError:
        want = None
    try:
        got = target().plan(lengths, dict(config))
    except ValueError as exc:
        if want is not None:
            raise RuleViolation(f"{what}: total {want} is valid, rejected: {exc!r}",
                                {"R-TOTAL-4", "R-TOTAL-6"}) from exc
        return
    if want is None:
        raise RuleViolation(f"{what}: the total is past INT32_MAX, accepted with total "
                            f"{got['total']}", {"R-ERR-8"})
    if int(got["total"]) != want:
        raise RuleViolation(f"{what}: total {got['total']}, the spec's is {want}",
                            {"R-TOTAL-4"})
