"""Totals near INT32_MAX over 1,024 ranks (capability `large_totals`): every rank holds only
about 2**20 rows, but the offsets and row numbers it is built from reach 2**30. An
implementation whose own indices switch to a wider type there (int64 for global row numbers)
must give the same rows and position ids as the spec's row map. The expected rows are derived
here from the reference's plan (O(B)) and R-SHARD-2 / R-SHARD-3, one vectorised run per
sequence, because the reference's own row map walks all 2**30 rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from thd_packing import reference

from .compare import same_bits
from .protocol import OutputRefused
from .under_test import RuleViolation, require, require_rows, target

PAD = -128
# (config, lengths, ranks): one sequence padded to A = 2**30 rows (zigzag, its tokens on the
# first 5 of 2,048 chunks and a partial chunk on rank 4), and a contiguous batch whose total is
# 2**30 (an empty sequence between two of A = 2**29 rows each).
CASES = [
    ({"tp_size": 2**19, "cp_size": 2**10}, [2**21 + 7], (0, 3, 4, 5, 1023)),
    ({"tp_size": 2**19, "cp_size": 2**10, "cp_layout": "contiguous"}, [5, 0, 2**20 + 3],
     (0, 1, 511, 512, 513, 1023)),
]


def _expected(seqs: list[np.ndarray], config: dict[str, Any],
              rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, position ids, real mask) of rank `rank` from the reference plan: zigzag chunks
    `rank` and `2cp-1-rank` of each sequence (R-SHARD-2), or global rows
    `[rank * local_rows, (rank + 1) * local_rows)` (R-SHARD-3); a row is real iff its offset is
    below the sequence's length (R-ROW-1, R-ROW-2), its position id is the offset (R-POS-2)."""
    cfg = reference.PackConfig(**config)
    plan = reference.plan_thd([len(s) for s in seqs], cfg)
    cp, local = cfg.cp_size, plan.local_rows
    seq_ids, offsets = [], []
    for i, p in enumerate(int(x) for x in plan.seqlens_padded):
        start = int(plan.cu_seqlens_padded[i])
        if cfg.cp_layout == "zigzag":
            c = p // (2 * cp)
            off = np.concatenate((np.arange(rank * c, (rank + 1) * c),
                                  np.arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c)))
        else:
            lo, hi = max(start, rank * local), min(start + p, (rank + 1) * local)
            off = np.arange(lo - start, max(hi, lo) - start)
        seq_ids.append(np.full(off.size, i))
        offsets.append(off)
    seq, offset = np.concatenate(seq_ids), np.concatenate(offsets)
    assert seq.size == local, "the expected row map must cover the rank's local rows"
    lengths = np.array([len(s) for s in seqs])
    real = offset < lengths[seq]
    rows = np.full(local, PAD, dtype=np.int8)
    for i, s in enumerate(seqs):
        here = real & (seq == i)
        rows[here] = s[offset[here]]
    return rows, offset, real


@pytest.mark.rules("R-SHARD-2", "R-SHARD-3", "R-ROW-1", "R-ROW-2", "R-POS-2")
@pytest.mark.parametrize("config,lengths,ranks", CASES, ids=["zigzag", "contiguous"])
def test_rank_rows_with_a_total_of_2_pow_30(config: dict[str, Any], lengths: list[int],
                                            ranks: tuple[int, ...]) -> None:
    """Each listed rank's rows are the spec's (real rows bit for bit, padding rows `pad_value`)
    and its real rows' position ids are their offsets."""
    require("large_totals", "pad_value")
    if config.get("cp_layout") == "contiguous":
        require("contiguous", "zero_length")
    require_rows(2**30, "a total of 2**30 rows over 1,024 ranks")
    rng = np.random.default_rng(len(lengths))
    seqs = [rng.integers(-100, 100, n).astype(np.int8) for n in lengths]
    for rank in ranks:
        want_rows, want_pos, real = _expected(seqs, config, rank)
        what = f"pack(lengths {lengths}, config={config}, rank {rank})"
        try:
            rows, pos, _ = target().pack(seqs, dict(config), rank, pad_value=PAD)
        except OutputRefused:  # a failure of its own rule
            raise
        except Exception as exc:  # a valid batch rejected or crashed is the failure under test
            raise RuleViolation(f"{what}: raised {exc!r}", {"R-SHARD-2", "R-SHARD-3"}) from exc
        rows, pos = np.asarray(rows), np.asarray(pos)
        if not same_bits(rows, want_rows):
            bad = np.flatnonzero(rows != want_rows) if rows.shape == want_rows.shape else [-1]
            raise RuleViolation(f"{what}: rows differ from the spec's (first at local row "
                                f"{bad[0] if len(bad) else '?'})",
                                {"R-ROW-1", "R-ROW-2", "R-SHARD-2", "R-SHARD-3"})
        if not np.array_equal(pos[real], want_pos[real]):
            raise RuleViolation(f"{what}: real rows' position ids are not their offsets",
                                {"R-POS-2"})
