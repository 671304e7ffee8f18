"""Row offsets beyond float32's exact integers (2**24): a total of 2**25 rows over 2 ranks
(capability `large_totals`). Every index is an integer in the spec; an implementation that
computes one in floating point (a true division where a floor division is meant) reads a
neighbouring row, and a sequence comes back as padding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .compare import same_bits
from .under_test import RuleViolation, require, require_rows, target

TOTAL = 2**25  # at least
# The tp alignment pads every sequence to 2**24 rows. Zigzag: the second sequence has tokens on
# rank 1 (beyond c = P / 2cp = 2**22), whose source offsets there pass 2**24 and are odd.
CASES = [
    ({"tp_size": 2**22, "cp_size": 2}, [3, 2**22 + 5]),  # A0 = 2 * tp * cp = 2**24
    ({"tp_size": 2**23, "cp_size": 2, "cp_layout": "contiguous"}, [5, 0, 2**23 + 3]),
]


@pytest.mark.rules("R-UNPACK-2", "R-ROW-1", "R-ROW-2", "R-SHARD-2", "R-SHARD-3")
@pytest.mark.parametrize("config,lengths", CASES, ids=["zigzag", "contiguous"])
def test_roundtrip_at_2_pow_25_rows(config: dict[str, Any], lengths: list[int]) -> None:
    """Pack every rank and unpack: the batch comes back exactly (R-UNPACK-2), and across the
    ranks the rows that are not `pad_value` hold the batch's tokens, each as often as the batch
    does (R-ROW-1, R-ROW-2)."""
    require("unpack", "large_totals")
    if config.get("cp_layout") == "contiguous":
        require("contiguous", "zero_length")
    require_rows(TOTAL, "a total of 2**25 rows")
    rng = np.random.default_rng(sum(lengths))
    seqs = [rng.integers(0, 100, n).astype(np.int8) for n in lengths]
    cp = int(config.get("cp_size", 1))
    packed = [target().pack(seqs, dict(config), r, pad_value=-1) for r in range(cp)]
    shards, meta = [np.asarray(p[0]) for p in packed], packed[0][2]
    assert int(meta["total"]) >= TOTAL, f"the plan's total is {meta['total']}, below {TOTAL}"
    what = f"pack of lengths {lengths} under {config} (total {meta['total']})"
    tokens = np.bincount(np.concatenate(seqs), minlength=100)
    held = np.bincount(np.concatenate([s[s != -1] for s in shards]), minlength=100)
    if not np.array_equal(held, tokens):
        raise RuleViolation(f"{what}: the ranks' non-padding rows are not the batch's tokens",
                            {"R-ROW-1", "R-ROW-2"})
    back = target().unpack(shards, meta, dict(config))
    for i, (got, want) in enumerate(zip(back, seqs, strict=True)):
        if not same_bits(np.asarray(got), want):
            raise RuleViolation(f"{what}, then unpack: sequence {i} differs",
                                {"R-UNPACK-2", "R-SHARD-2", "R-SHARD-3"})
