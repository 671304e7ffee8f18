"""Plans whose arrays have the wrong lengths for each other (capability `forged_plan_checks`):
unpack rejects them with ValueError (R-ERR-11's MAY); it never fails with another exception,
never reads out of range. A plan of B = 0 sequences may instead give B = 0 arrays
(R-UNPACK-1)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .compare import outcome, snapshot
from .under_test import RuleViolation, require, target

I32 = np.int32
# seqlens [5, 0, 3] under cp = 2 zigzag: padded [8, 0, 4], total 12, local rows 6.
GOOD: dict[str, Any] = {
    "seqlens": np.array([5, 0, 3], I32), "seqlens_padded": np.array([8, 0, 4], I32),
    "cu_seqlens": np.array([0, 5, 5, 8], I32), "cu_seqlens_padded": np.array([0, 8, 8, 12], I32),
    "max_seqlen": 8, "total": 12, "local_rows": 6}
FORGED: dict[str, dict[str, Any]] = {
    "empty-cu_seqlens_padded": {"cu_seqlens_padded": np.array([], I32)},
    "one-entry-cu_seqlens_padded": {"cu_seqlens_padded": np.array([0], I32)},
    "short-seqlens_padded": {"seqlens_padded": np.array([8, 0], I32)},
    "long-seqlens_padded": {"seqlens_padded": np.array([8, 0, 4, 0], I32)},
    "long-cu_seqlens_padded": {"cu_seqlens_padded": np.array([0, 8, 8, 12, 12], I32)},
    "short-both": {"seqlens_padded": np.array([8, 0], I32),
                   "cu_seqlens_padded": np.array([0, 8, 12], I32)},
    "long-both": {"seqlens_padded": np.array([8, 0, 4, 0], I32),
                  "cu_seqlens_padded": np.array([0, 8, 8, 12, 12], I32)},
}
EMPTY: dict[str, Any] = {
    "seqlens": np.array([], I32), "seqlens_padded": np.array([], I32),
    "cu_seqlens": np.array([0], I32), "cu_seqlens_padded": np.array([0], I32),
    "max_seqlen": 0, "total": 0, "local_rows": 0}


@pytest.mark.rules("R-ERR-11")
@pytest.mark.parametrize("kind", sorted(FORGED))
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_plan_arrays_of_wrong_lengths(kind: str, layout: str) -> None:
    """ValueError, and the shards are left unchanged."""
    require("unpack", "forged_plan_checks")
    if layout == "contiguous":
        require("contiguous")
    meta = {**GOOD, **FORGED[kind]}
    shards = [np.arange(12, dtype=np.int64).reshape(6, 2) + 100 * r for r in range(2)]
    before = snapshot(shards)
    got = outcome(lambda: target().unpack(shards, meta,
                                          {"cp_size": 2, "cp_layout": layout}))
    if snapshot(shards) != before:
        raise RuleViolation("unpack changed its input shards", {"R-ERR-11"})
    if not isinstance(got, ValueError):
        raise RuleViolation(f"unpack with a forged plan ({kind}): expected ValueError, got "
                            f"{got!r}", {"R-ERR-11"})


@pytest.mark.rules("R-ERR-11", "R-UNPACK-1")
@pytest.mark.parametrize("cp,layout", [(1, "zigzag"), (2, "zigzag"), (2, "contiguous")])
def test_plan_of_no_sequences(cp: int, layout: str) -> None:
    """A plan of B = 0 sequences and empty shards: ValueError (no pack has B = 0, R-ERR-7) or
    B = 0 arrays; any other exception is a crash."""
    require("unpack", "forged_plan_checks")
    if layout == "contiguous":
        require("contiguous")
    shards = [np.zeros((0, 2), np.int64) for _ in range(cp)]
    result: list[Any] = []
    got = outcome(lambda: result.append(
        target().unpack(shards, dict(EMPTY), {"cp_size": cp, "cp_layout": layout})))
    if got is None and len(result[0]) != 0:
        raise RuleViolation(f"unpack of a B = 0 plan returned {len(result[0])} arrays",
                            {"R-UNPACK-1"})
    if got is not None and not isinstance(got, ValueError):
        raise RuleViolation(f"unpack of a B = 0 plan (cp {cp}, {layout}): expected "
                            f"ValueError or no arrays, got {got!r}", {"R-ERR-11"})
