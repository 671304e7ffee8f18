"""impl on float8 batches (NumPy has no float8: the bits go in and come back as uint8, viewed
as the float8 dtype in between): real rows are moved bit for bit (R-ROW-1), padding rows hold
pad_value's float8 encoding (R-ROW-2, R-IN-5), and a pad value the dtype cannot hold is
rejected (R-ERR-10).

The encodings are the OCP 8-bit floating point formats': E4M3 (bias 7, no infinities, largest
finite 448) and E5M2 (bias 15, IEEE-style infinities, largest finite 57344)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from thd_packing import reference
from thd_packing.conformance.compare import names_field, outcome, same_bits
from thd_packing.conformance.under_test import RuleViolation

from ._impl_api import IMPL

# (dtype, pad value, its encoding); 0.0 and -0.0 differ only in the sign bit.
CASES: list[tuple[str, float, int]] = [
    ("float8_e4m3fn", 0.0, 0x00), ("float8_e4m3fn", -0.0, 0x80), ("float8_e4m3fn", 1.0, 0x38),
    ("float8_e4m3fn", -1.5, 0xBC), ("float8_e4m3fn", 448.0, 0x7E),
    ("float8_e4m3fn", 2.0**-6, 0x08),
    ("float8_e5m2", 0.0, 0x00), ("float8_e5m2", -0.0, 0x80), ("float8_e5m2", 1.0, 0x3C),
    ("float8_e5m2", -1.5, 0xBE), ("float8_e5m2", 57344.0, 0x7B),
    ("float8_e5m2", float("inf"), 0x7C), ("float8_e5m2", float("-inf"), 0xFC),
    ("float8_e5m2", 2.0**-6, 0x24),
]
CONFIGS = ({"cp_size": 2}, {"cp_size": 2, "tp_size": 8}, {"cp_size": 3, "cp_layout": "contiguous"})


@pytest.mark.rules("R-IN-1", "R-IN-5", "R-ROW-1", "R-ROW-2")
@pytest.mark.parametrize("dtype,pad_value,encoding", CASES,
                         ids=[f"{d}-{v}" for d, v, _ in CASES])
def test_float8_rows_and_padding(dtype: str, pad_value: float, encoding: int) -> None:
    """Every rank's rows are the reference's for the same bits as uint8 with the pad value's
    encoding as `pad_value` (few padding rows, and mostly padding with tp_size=8)."""
    rng = np.random.default_rng(7)
    bits = [rng.integers(0, 256, n).astype(np.uint8) for n in (5, 0, 11)]
    for config in CONFIGS:
        cfg = reference.PackConfig(**config)  # type: ignore[arg-type]
        for rank in range(cfg.cp_size):
            want, _, _ = reference.pack_thd(bits, cfg, rank, pad_value=encoding)
            rows = IMPL.pack_float8(bits, dtype, dict(config), rank, pad_value=pad_value).rows
            if not same_bits(np.asarray(rows), want):
                raise RuleViolation(
                    f"pack of {dtype} bits with pad_value={pad_value!r}, config {config}, rank "
                    f"{rank}: rows {np.asarray(rows).tolist()} are not {want.tolist()} (real "
                    "rows bit for bit, padding the pad value's encoding "
                    f"{encoding:#04x})", {"R-ROW-1", "R-ROW-2", "R-IN-5"})


@pytest.mark.rules("R-IN-5", "R-ERR-10")
@pytest.mark.parametrize("dtype,pad_value", [
    ("float8_e4m3fn", float("inf")), ("float8_e4m3fn", float("-inf")),
    ("float8_e4m3fn", 449.0), ("float8_e5m2", 57345.0), ("float8_e5m2", -(2**70)),
], ids=["e4m3fn-inf", "e4m3fn-neg-inf", "e4m3fn-449", "e5m2-57345", "e5m2-neg-2^70"])
def test_float8_pad_value_it_cannot_hold(dtype: str, pad_value: Any) -> None:
    """ValueError naming pad_value: E4M3 has no infinity, and a magnitude above the largest
    finite value is not representable (R-IN-5)."""
    bits = [np.arange(3, dtype=np.uint8)]
    got = outcome(lambda: IMPL.pack_float8(bits, dtype, {"cp_size": 1}, 0, pad_value=pad_value))
    what = f"pack of {dtype} with pad_value={pad_value!r}"
    if not isinstance(got, ValueError):
        raise RuleViolation(f"{what}: expected ValueError, got {got!r}", {"R-ERR-10"})
    if not names_field("pad_value", str(got)):
        raise RuleViolation(f"{what}: the message {str(got)!r} does not name pad_value",
                            {"R-ERR-10"})
