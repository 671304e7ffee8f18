"""The total is the smallest one meeting every requirement, per convention, by brute force.

Written apart from `reference/` and from `requirements.total_modulus`: for a drawn batch and
convention the test walks the totals upward from S, one row at a time, and takes the first that
meets every requirement the spec lists for a total (each checked on its own, never through M):
at least N (R-TOTAL-3), a multiple of A so that the last sequence or the padding segment stays
aligned (R-TOTAL-5, R-TAIL-1), of tp * cp (R-TOTAL-2: sequence parallelism on every rank's rows),
of the bucket (R-TOTAL-2) and of F (R-TOTAL-1, R-FP8-1: 128 * A0 for fp8=True, tp * cp * q for a
recipe). That first total must be the target's: R-TOTAL-4 ("the smallest"), and the walk
is the minimality argument made concrete.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from . import requirements as req
from .running import call_target, readable_output
from .strategies import configs, fit_static, lengths
from .under_test import RuleViolation, assume_declared, caps, prop_settings, target

CAPS = caps()
INT32_MAX = 2**31 - 1


def unmet(total: int, seqlens: tuple[int, ...], config: dict[str, Any]) -> list[str]:
    """The rules a candidate total breaks, each requirement checked by itself."""
    return _unmet(total, req.lower_bound(seqlens, config), req.total_divisors(config))


def _unmet(total: int, bound: int, divisors: list[tuple[str, int]]) -> list[str]:
    out = ["R-TOTAL-3"] if total < bound else []
    out += [rule for rule, divisor in divisors if total % divisor]
    if total > INT32_MAX:
        out.append("R-TOTAL-6")
    return sorted(set(out))


def smallest_total(seqlens: tuple[int, ...], config: dict[str, Any]) -> int:
    """The first total from S upward that meets every requirement (one row at a time)."""
    bound, divisors = req.lower_bound(seqlens, config), req.total_divisors(config)
    total = req.padded_sum(seqlens, config)
    while _unmet(total, bound, divisors):
        total += 1
    return total


_CASES = st.tuples(lengths(max_batch=12, budget=600, caps=CAPS), configs(caps=CAPS)).map(
    lambda c: (c[0], fit_static(c[1], len(c[0]))))


def _zz(**config: Any) -> dict[str, Any]:
    return {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False, "bucket": None,
            "min_local_rows": None, **config}


@pytest.mark.rules("R-TOTAL-1", "R-TOTAL-2", "R-TOTAL-3", "R-TOTAL-4", "R-ALIGN-5", "R-FP8-1",
                   "R-TAIL-1")
@prop_settings()
@example(((513,), _zz(bucket=512)))  # spec 13.1
@example(((3,), _zz(cp_size=2, bucket=6)))  # erratum E-1
@example(((1,), _zz(cp_size=2, min_local_rows=3)))  # erratum E-2
@example(((1,), _zz(tp_size=2, cp_size=2, seq_align="cp")))  # tp on the total only
@example(((5, 0), _zz(tp_size=2, cp_size=2, fp8="mxfp8", tail="segment")))
@example(((7,), _zz(tp_size=3, fp8="block", seq_align="cp", bucket=100)))
@given(_CASES)
def test_total_is_the_smallest_meeting_every_requirement(
        case: tuple[tuple[int, ...], dict[str, Any]]) -> None:
    """Pack on rank 0 and compare the target's total with the brute-force smallest one."""
    seqlens, config = case
    assume_declared(config=config, lengths=seqlens)
    seqs = [np.arange(n, dtype=np.int64) + 1000 * (i + 1) for i, n in enumerate(seqlens)]
    what = "pack(rank 0)"
    rules = {"R-IN-1", "R-IN-3"} | ({"R-IN-2"} if 0 in seqlens else set())
    rows, _, meta = readable_output(call_target(what, target().pack, seqs, dict(config),
                                                0, rules=rules), what)
    got = int(meta["total"]) if "total" in meta else int(np.asarray(
        meta["cu_seqlens_padded"])[-1])
    want = smallest_total(seqlens, config)
    if got == want:
        return
    broken = unmet(got, seqlens, config)
    where = f"lengths {list(seqlens)}, {config}: total {got}, the smallest meeting every " \
        f"requirement is {want}"
    if broken:
        raise RuleViolation(f"{where}; {got} breaks {broken}", set(broken))
    # A total meeting every requirement but larger than the first one: not the smallest.
    raise RuleViolation(f"{where}; {got} also meets them but is not the smallest",
                        {"R-TOTAL-4"})
