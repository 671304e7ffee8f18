"""Config values at the edges the spec draws, judged through pack and plan: `max_num_seqs =
INT32_MAX` is valid (R-ERR-12 rejects only values above it), so a call with that config and one
other fault reports that fault; a `tp_size` given as a NumPy integer whose products with the
other sizes pass 2**63 is rejected as the same Python int is (R-ERR-8), never wrapped by
fixed-width arithmetic into a small or zero alignment."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import reference

from . import harness as h
from .rejection import BASE_CONFIG, compare_pack, two_sequences
from .strategies import INT32_MAX

# One fault each, checked before any plan entry exists (spec section 11): the call must report
# it, not the valid max_num_seqs next to it.
EDGE_FAULTS = ["cp_rank", "negative_length", "empty_batch"]


@h.needs("static_metadata", "config_checks")
@pytest.mark.rules("R-ERR-12", "R-IN-3", "R-ERR-5", "R-ERR-6", "R-ERR-7")
@pytest.mark.parametrize("fault", EDGE_FAULTS)
def test_max_num_seqs_int32_max_is_valid(fault: str) -> None:
    """max_num_seqs = INT32_MAX is the largest valid value (R-ERR-12 rejects `> INT32_MAX`):
    with a cp_rank out of range (pack), a negative length or an empty batch (plan), the error is
    that fault's, naming its field. A packer whose bound is `>=` reports max_num_seqs instead.
    Not run on a target with `max_rows`: one that plans before checking would allocate the
    INT32_MAX entries."""
    h.require_rows(INT32_MAX, "max_num_seqs=INT32_MAX")
    config = {**BASE_CONFIG, "max_num_seqs": INT32_MAX}
    rules = {"R-ERR-12", "R-IN-3"}
    if fault == "cp_rank":
        h.require("parallel_state_checks")
        compare_pack(two_sequences(), config, cp_rank=config["cp_size"], rules=rules,
                     field="cp_rank")
        return
    h.require("plan")
    seqlens = [5, -1] if fault == "negative_length" else []
    want = h.outcome(lambda: reference.plan_thd(seqlens, reference.PackConfig(**config)))
    assert isinstance(want, ValueError), f"the reference accepts plan({seqlens}, {config})"
    got = h.outcome(lambda: h.target().plan(seqlens, dict(config)))
    h.check_same_rejection(want, got, f"plan({seqlens}, {config})", rules, ("seqlens",))


# Python-int configs whose alignment or tp * cp passes 2**63: in int64 arithmetic the products
# wrap (2**62 * 2 * 2 is 0 modulo 2**64; (2**63 - 1) * 4 is -4), so a packer that keeps the
# NumPy integer divides by zero or accepts a wrapped, tiny alignment.
WRAPPING_TP = [
    {"tp_size": 2**62, "cp_size": 2},
    {"tp_size": 2**63 - 1, "cp_size": 2},
    {"tp_size": 2**40, "cp_size": 2**40},
    {"tp_size": 2**62, "cp_size": 4, "cp_layout": "contiguous"},
]


@pytest.mark.rules("R-ERR-8", "R-TOTAL-6")
@pytest.mark.parametrize("config", WRAPPING_TP, ids=["tp2^62-cp2", "tp-int64max-cp2",
                                                     "tp2^40-cp2^40", "tp2^62-cp4-contiguous"])
def test_numpy_tp_size_beyond_int64_products(config: dict[str, Any]) -> None:
    """tp_size as np.int64 (spec section 0: an integer), with cp_size such that the alignment
    passes 2**63 (capability `plan`): ValueError, as for the same Python ints (R-ERR-8: a
    non-empty sequence pads past INT32_MAX)."""
    h.require("plan", "tensor_parallel")
    if config.get("cp_layout") == "contiguous":
        h.require("contiguous")
    given = {**config, "tp_size": np.int64(config["tp_size"])}
    want = h.outcome(lambda: reference.plan_thd([5, 3], reference.PackConfig(**config)))
    assert isinstance(want, ValueError), f"the reference accepts {config}"
    got = h.outcome(lambda: h.target().plan([5, 3], dict(given)))
    if not isinstance(got, ValueError):
        raise h.RuleViolation(f"plan([5, 3], config={given}): the Python-int config's total is "
                              f"above INT32_MAX; expected ValueError, got {got!r}",
                              {"R-ERR-8", "R-TOTAL-6"})
