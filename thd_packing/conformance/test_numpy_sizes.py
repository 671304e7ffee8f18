"""Config sizes and cp_rank given as NumPy integers (spec section 0: an integer is anything
`operator.index` accepts): the pack is the one the same Python ints give, its plan's counts are
Python ints (R-META-4, R-META-5), and a NumPy size whose total is beyond INT32_MAX is rejected
as the Python int would be (R-ERR-8), never wrapped by fixed-width arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from thd_packing import reference

from .compare import meta_mismatches, outcome, same_bits
from .contract import segment_batch
from .protocol import zero_length_of
from .under_test import RuleViolation, require, require_config, target, with_convention

FIELDS = ("tp_size", "cp_size", "bucket", "min_local_rows")
# Each case: Python-int config, the NumPy type each of its sizes is given as.
CASES: list[tuple[dict[str, Any], Any]] = [
    ({"tp_size": 2, "cp_size": 2, "min_local_rows": 9}, np.int64),
    ({"tp_size": 3, "cp_size": 2, "cp_layout": "contiguous", "min_local_rows": 7}, np.int32),
    ({"tp_size": 1, "cp_size": 4, "bucket": 12}, np.uint16),
    ({"tp_size": 2, "cp_size": 1, "bucket": 10, "min_local_rows": 30}, np.int8),
    ({"tp_size": 2, "cp_size": 2, "fp8": True}, np.uint64),
    # without tensor parallelism or zigzag, for a target that declines them
    ({"tp_size": 1, "cp_size": 3, "cp_layout": "contiguous", "bucket": 12}, np.int16),
    ({"tp_size": 1, "cp_size": 1, "min_local_rows": 5}, np.uint8),
]
INT_KEYS = ("max_seqlen", "total", "local_rows")


def _numpy_config(config: dict[str, Any], kind: Any) -> dict[str, Any]:
    return {k: kind(v) if k in FIELDS and v is not None else v for k, v in config.items()}


def _declared(config: dict[str, Any], lengths: list[int] | None = None) -> dict[str, Any]:
    """The config under the target's fixed convention (for the target and the reference
    alike), skipped as declined unless the target has every feature it uses, base features
    (tensor parallelism, zigzag) included."""
    config = with_convention(config)
    require_config(config, lengths=lengths)
    return config


@pytest.mark.rules("R-IN-3", "R-IN-4", "R-META-4", "R-META-5", "R-ROW-1")
@pytest.mark.parametrize("config,kind", CASES, ids=lambda v: getattr(v, "__name__", None))
def test_numpy_integer_sizes(config: dict[str, Any], kind: Any) -> None:
    """Every rank's rows and position ids are the target's own for the same Python ints (the
    same config, R-IN-3), its plan is the reference's, and `max_seqlen`, `total` and
    `local_rows` are Python ints (R-META-4, R-META-5), not NumPy scalars that wrap at 2**63."""
    seqs = [np.arange(n, dtype=np.int64) + 100 * n for n in (5, 0, 17, 3)]
    config = _declared(config, [len(s) for s in seqs])
    given = _numpy_config(config, kind)
    cfg = reference.PackConfig(**config)
    for rank in range(cfg.cp_size):
        # the plan of the sequences the target's segments stand for (R-META-8)
        plan = reference.plan_thd([len(s) for s in segment_batch(seqs, zero_length_of(target()))],
                                  cfg)
        want_rows, want_pos, _ = target().pack(seqs, dict(config), rank)
        rows, pos, meta = target().pack(seqs, dict(given), kind(rank))
        what = f"pack(config={given}, cp_rank={kind(rank)!r})"
        wrong = [f"{k}={meta[k]!r} ({type(meta[k]).__name__})" for k in INT_KEYS
                 if k in meta and type(meta[k]) is not int]
        if wrong:
            raise RuleViolation(f"{what}: {', '.join(wrong)}: not Python ints",
                                {"R-META-4", "R-META-5"})
        mismatches = meta_mismatches(meta, plan)
        if mismatches:
            raise RuleViolation(f"{what}: plan differs: {mismatches}", {"R-META-5"})
        if not (same_bits(np.asarray(rows), np.asarray(want_rows))
                and same_bits(np.asarray(pos), np.asarray(want_pos))):
            raise RuleViolation(f"{what}: rows or position ids differ from the Python-int "
                                "config's", {"R-IN-3", "R-ROW-1"})


@pytest.mark.rules("R-ERR-8", "R-TOTAL-6")
@pytest.mark.parametrize("config", [
    {"cp_size": 4, "min_local_rows": 2**62},
    {"cp_size": 2, "min_local_rows": 2**62},
    {"cp_size": 2**40, "min_local_rows": 2**40},
    {"cp_size": 3, "min_local_rows": 2**63 - 1},
    {"cp_size": 4, "cp_layout": "contiguous", "min_local_rows": 2**62},
], ids=["cp4-mlr2^62", "cp2-mlr2^62", "cp2^40-mlr2^40", "cp3-mlr-int64max",
        "cp4-contiguous-mlr2^62"])
def test_numpy_sizes_beyond_int64_products(config: dict[str, Any]) -> None:
    """Sizes whose products pass 2**63, given as np.int64 (capability `plan`): ValueError, as
    for the same Python ints (R-ERR-8: the total is above INT32_MAX); int64 arithmetic that
    wraps to a small total and is accepted would hand consumers a wrong buffer."""
    require("plan")
    config = _declared(config)
    given = _numpy_config(config, np.int64)
    got = outcome(lambda: target().plan([5, 3], dict(given)))
    want = outcome(lambda: reference.plan_thd([5, 3], reference.PackConfig(**config)))
    assert isinstance(want, ValueError), f"the reference accepts {config}"
    if not isinstance(got, ValueError):
        raise RuleViolation(f"plan([5, 3], config={given}): the Python-int config's total "
                            f"is above INT32_MAX; expected ValueError, got {got!r}",
                            {"R-ERR-8", "R-TOTAL-6"})
