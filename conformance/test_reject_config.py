"""Bad PackConfig fields (spec section 11): sizes, bucket, min_local_rows, cp_layout, fp8, totals
above INT32_MAX, and the target's own 0-d scalars as sizes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference

from . import harness as h
from .rejection import BASE_CONFIG, by_class, compare_pack, two_sequences
from .strategies import (
    CONFIG_FEATURES,
    INT32_MAX,
    bad_buckets,
    bad_flags,
    bad_layouts,
    bad_min_local_rows,
    bad_sizes,
    rows_bound,
)


@h.needs("parallel_state_checks")
@pytest.mark.rules("R-IN-3", "R-ERR-1", "R-ERR-2")
@h.prop_settings(0.5)
@given(st.sampled_from(["tp_size", "cp_size"]), bad_sizes)
def test_reject_parallel_sizes(field: str, value: Any) -> None:
    """tp_size / cp_size: non-integers (bool, float, str) TypeError, < 1 ValueError."""
    compare_pack(two_sequences(), {**BASE_CONFIG, field: value}, rules=by_class("R-ERR-2"),
                 field=field)


FIELD_RULES = {"bucket": ("R-ERR-3", "R-ERR-3"), "min_local_rows": ("R-ERR-2", "R-ERR-1"),
               "cp_layout": ("R-ERR-4", "R-ERR-1"), "fp8": ("R-ERR-1", "R-ERR-1")}


FIELD_VALUES = {"bucket": bad_buckets, "min_local_rows": bad_min_local_rows,
                "cp_layout": bad_layouts, "fp8": bad_flags}


@h.needs("config_checks")
@pytest.mark.rules("R-IN-3", "R-ERR-1", "R-ERR-2", "R-ERR-3", "R-ERR-4")
@pytest.mark.parametrize("field", [
    pytest.param(f, marks=h.needs(f)) if f in CONFIG_FEATURES else f for f in sorted(FIELD_VALUES)
])
@h.prop_settings(0.5)
@given(data=st.data())
def test_reject_config_flags(field: str, data: st.DataObject) -> None:
    """User-facing config fields, one test per field so each gets its own minimal example:
    bucket (bool/float/str TypeError, < 1 ValueError, erratum E-7), min_local_rows, cp_layout,
    fp8. A field whose feature the target declines (bucket, fp8, min_local_rows) is declined."""
    value = data.draw(FIELD_VALUES[field], label=field)
    compare_pack(two_sequences(), {**BASE_CONFIG, field: value},
                 rules=by_class(*FIELD_RULES[field]), field=field)


ABOVE_INT32 = [
    pytest.param({"bucket": 2**31}, marks=h.needs("bucket"), id="bucket-2^31"),
    pytest.param({"min_local_rows": 2**31}, marks=h.needs("min_local_rows"),
                 id="min_local_rows-2^31"),
    pytest.param({"cp_size": 2, "bucket": INT32_MAX}, marks=h.needs("bucket"),
                 id="cp2-bucket-int32max"),
    # Alignments past int64 arithmetic: the sizes alone push the total beyond int32.
    pytest.param({"tp_size": 2**62}, marks=h.needs("tensor_parallel"), id="tp-2^62"),
    pytest.param({"tp_size": 2**31, "cp_size": 2**31}, marks=h.needs("tensor_parallel"),
                 id="tp-cp-2^31"),
    pytest.param({"cp_size": 4, "tp_size": 2, "bucket": 2**30 + 1}, marks=h.needs("bucket"),
                 id="cp4-tp2-bucket-2^30+1"),
]


@pytest.mark.rules("R-ERR-8", "R-TOTAL-6")
@pytest.mark.parametrize("config", ABOVE_INT32)
def test_reject_total_above_int32(config: dict[str, Any]) -> None:
    """A total above INT32_MAX is rejected with ValueError before any allocation (erratum E-8:
    int32 metadata would wrap). Not run on a target whose `max_rows` is below that total: a
    packer without the check would build it."""
    h.require_rows(rows_bound([3], {**BASE_CONFIG, "cp_size": 1, **config}), "this total")
    compare_pack([np.arange(3, dtype=np.int8)], {**BASE_CONFIG, "cp_size": 1, **config},
                 rules={"R-ERR-8", "R-TOTAL-6"})


@h.needs("plan")
@pytest.mark.rules("R-ERR-8", "R-TOTAL-6")
@pytest.mark.parametrize("config", ABOVE_INT32)
def test_plan_rejects_total_above_int32(config: dict[str, Any]) -> None:
    """The same totals through plan alone (no data): ValueError, never a wrapped total."""
    full = {**BASE_CONFIG, "cp_size": 1, **config}
    want = h.outcome(lambda: reference.plan_thd([5, 3], reference.PackConfig(**full)))
    got = h.outcome(lambda: h.target().plan([5, 3], dict(full)))
    h.check_same_rejection(want, got, f"plan([5, 3], {full})", {"R-ERR-8", "R-TOTAL-6"})


@h.needs("native_scalars")
@pytest.mark.rules("R-IN-3", "R-IN-4", "R-ERR-1")
@pytest.mark.parametrize("field", [
    "tp_size", "cp_size", pytest.param("bucket", marks=h.needs("bucket")),
    pytest.param("min_local_rows", marks=h.needs("min_local_rows")), "cp_rank"])
@pytest.mark.parametrize("value", [1, True, False, 1.0], ids=["1", "True", "False", "1.0"])
def test_native_scalars(field: str, value: bool | int | float) -> None:
    """The target's own 0-d array (capability `native_scalars`, e.g. `torch.tensor(True)`) as a
    size, bucket or cp_rank behaves as the Python scalar it holds: an int is accepted with the
    reference's rows; a bool or a float is not an integer (spec section 0) and raises TypeError."""
    native = h.target().native_scalar(value)
    config = dict(BASE_CONFIG)
    cp_rank: Any = 0
    if field == "cp_rank":
        cp_rank, rank_value = native, value
    else:
        config[field], rank_value = native, 0
    ref_config = {**config, **({} if field == "cp_rank" else {field: value})}
    want = h.outcome(lambda: reference.PackConfig(**ref_config)) or h.outcome(
        lambda: reference.pack_thd(two_sequences(), reference.PackConfig(**ref_config), rank_value))
    got_holder: list[Any] = []
    got = h.outcome(lambda: got_holder.append(h.target().pack(two_sequences(), config, cp_rank)))
    what = f"pack with {field}={native!r}"
    h.check_same_rejection(want, got, what, by_class("R-ERR-2")(want), (field,))
    if want is None:
        ref_rows = reference.pack_thd(two_sequences(), reference.PackConfig(**ref_config),
                                      rank_value)[0]
        assert h.same_value(np.asarray(got_holder[0][0]), ref_rows), f"{what}: rows differ"
