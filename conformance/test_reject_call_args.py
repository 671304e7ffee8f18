"""Bad per-call arguments of pack (spec section 11): cp_rank, need_roll, pad_value."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from . import contract
from . import harness as h
from .rejection import BASE_CONFIG, by_class, compare_pack, two_sequences
from .strategies import (
    Batch,
    PackCase,
    bad_flags,
    bad_pad_values,
    bad_ranks,
)


@h.needs("parallel_state_checks")
@pytest.mark.rules("R-IN-4", "R-ERR-1", "R-ERR-5")
@h.prop_settings(0.5)
@given(bad_ranks)
def test_reject_cp_rank(value: Any) -> None:
    """cp_rank: a non-integer TypeError, outside [0, cp_size) ValueError."""
    cp = BASE_CONFIG["cp_size"]
    rank = {"neg": -1, "cp": cp, "cp+3": cp + 3}.get(value, value) if isinstance(value, str) \
        else value
    compare_pack(two_sequences(), BASE_CONFIG, cp_rank=rank, rules=by_class("R-ERR-5"),
                 field="cp_rank")


@h.needs("need_roll", "need_roll_type_checks")
@pytest.mark.rules("R-IN-4", "R-ERR-1")
@h.prop_settings(0.5)
@given(bad_flags)
def test_reject_need_roll(value: Any) -> None:
    """need_roll must be a real bool (declined where the target's callers check it:
    validated_elsewhere "need_roll_type")."""
    compare_pack(two_sequences(), BASE_CONFIG, need_roll=value, rules={"R-ERR-1"},
                 field="need_roll")


PAD_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64", "complex64"]


@h.needs("pad_value")
@pytest.mark.rules("R-IN-4", "R-IN-5", "R-ERR-1", "R-ERR-10")
@h.prop_settings()
@given(st.sampled_from(PAD_DTYPES).flatmap(lambda d: st.tuples(st.just(d), bad_pad_values(d))))
def test_reject_pad_value(dtype_value: tuple[str, Any]) -> None:
    """pad_value: not a bool/int/float TypeError; not representable in the dtype ValueError."""
    dtype, value = dtype_value
    compare_pack(two_sequences(dtype), BASE_CONFIG, pad_value=value, rules=by_class("R-ERR-10"),
                 field="pad_value")


@h.needs("pad_value")
@pytest.mark.rules("R-IN-5", "R-ROW-2")
@pytest.mark.parametrize("dtype,value", [("uint32", 2**31), ("uint32", 2**32 - 1),
                                         ("uint64", 2**63), ("uint16", 2**15)])
def test_pad_value_at_the_sign_bit(dtype: str, value: int) -> None:
    """An unsigned pad value at or above the sign bit of the same-width signed type is written
    exactly (capability `pad_value`): every padding row of the target's own buffer (its
    `cu_seqlens_padded` read through TE's partition, under its own convention and total) holds
    the value, bit for bit."""
    seqs = [np.arange(3, dtype=dtype), np.arange(2, dtype=dtype)]
    # Padding rows from a feature the target has: tp 4, else a bucket of 8 (5 tokens, a total
    # of 8 or more under any convention).
    if "tensor_parallel" in h.caps():
        config: dict[str, Any] = {"tp_size": 4}
    elif "bucket" in h.caps():
        config = {"bucket": 8}
    else:
        pytest.skip("declined: tensor_parallel, bucket (no way to make padding rows)")
    config = h.with_convention(config)
    case = PackCase(config, Batch((3, 2), dtype=dtype), pad_value=value)
    got = h.run_target(case, seqs)
    buffer = contract.check_buffer(got, config)
    pad = np.full((), value, dtype=dtype)
    rows = 0
    for rank, out in enumerate(got):
        seg, off = buffer.slots[rank]
        padding = ~(off < np.array([3, 2, 0])[np.minimum(seg, 2)])
        rows += int(padding.sum())
        wrong = np.flatnonzero(padding & (np.asarray(out.rows) != pad))
        if wrong.size:
            k = int(wrong[0])
            raise h.RuleViolation(f"{dtype} pad {value}: rank {rank} padding row {k} holds "
                                  f"{out.rows[k]!r}", {"R-IN-5", "R-ROW-2"})
    assert rows, f"config {config}: the target's buffer has no padding row"
