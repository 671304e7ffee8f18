"""reference.partitioned_indices (R-CONSUMER-6, R-CONSUMER-2) against two independent oracles.

- a brute force written from TE's per-row description: every global row g of segment k, offset o
  belongs to chunk q = o // (Q_k / 2cp); its owner is q for q < cp and 2cp - 1 - q otherwise;
  each rank lists its rows sorted by (segment, first or second chunk, row);
- reference.row_map on reference plans: local row k is global row cu_seqlens_padded[seq] + offset.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thd_packing import reference as ref

FAST = settings(max_examples=80, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def brute_force(bounds: list[int], cp: int, layout: str) -> list[list[int]]:
    """Every rank's global rows, built row by row from the owner of each row."""
    total = bounds[-1]
    owned: list[list[tuple[int, int, int]]] = [[] for _ in range(cp)]
    for g in range(total):
        k = max(s for s in range(len(bounds) - 1) if bounds[s] <= g < bounds[s + 1])
        if cp == 1:
            owned[0].append((0, 0, g))
        elif layout == "contiguous":
            owned[g // (total // cp)].append((0, 0, g))
        else:
            chunk = (bounds[k + 1] - bounds[k]) // (2 * cp)
            q = (g - bounds[k]) // chunk
            owner = q if q < cp else 2 * cp - 1 - q
            owned[owner].append((k, 0 if q < cp else 1, g))
    return [[g for _, _, g in sorted(rows)] for rows in owned]


@st.composite
def zigzag_bounds(draw: st.DrawFn) -> tuple[list[int], int]:
    cp = draw(st.integers(1, 5))
    chunks = draw(st.lists(st.integers(0, 4), min_size=1, max_size=6))
    segments = [c * 2 * cp for c in chunks]
    return [0, *np.cumsum(segments).tolist()], cp


@FAST
@given(zigzag_bounds())
def test_zigzag_matches_brute_force(case: tuple[list[int], int]) -> None:
    """R-CONSUMER-6: zigzag partition (empty segments included) equals the per-row owner."""
    bounds, cp = case
    want = brute_force(bounds, cp, "zigzag")
    got = [ref.partitioned_indices(bounds, bounds[-1], cp, r) for r in range(cp)]
    assert got == want
    assert sorted(g for rows in got for g in rows) == list(range(bounds[-1]))


@FAST
@given(st.integers(1, 5), st.lists(st.integers(0, 9), min_size=1, max_size=6),
       st.integers(0, 4))
def test_contiguous_matches_brute_force(cp: int, segments: list[int], extra: int) -> None:
    """R-CONSUMER-6: contiguous partition is the slice, whatever the segments (R-CONSUMER-3:
    only the total must split by cp)."""
    segments = segments + [(-sum(segments)) % cp + cp * extra]
    bounds = [0, *np.cumsum(segments).tolist()]
    got = [ref.partitioned_indices(bounds, bounds[-1], cp, r, "contiguous") for r in range(cp)]
    assert got == brute_force(bounds, cp, "contiguous")


configs = st.builds(
    ref.PackConfig, tp_size=st.integers(1, 3), cp_size=st.integers(1, 4),
    cp_layout=st.sampled_from(["zigzag", "contiguous"]), fp8=st.just(False),
    bucket=st.one_of(st.none(), st.integers(1, 40)),
    min_local_rows=st.one_of(st.none(), st.integers(1, 30)),
)


@FAST
@given(configs, st.lists(st.integers(0, 30), min_size=1, max_size=6))
def test_row_map_is_te_partition(config: ref.PackConfig, lengths: list[int]) -> None:
    """R-CONSUMER-6: the reference's row map puts every local row where TE's partition of the
    plan's own cu_seqlens_padded says (R-SHARD-1..3 agree with the consumer)."""
    plan = ref.plan_thd(lengths, config)
    cu = [int(c) for c in plan.cu_seqlens_padded]
    for rank in range(config.cp_size):
        mapped = [cu[src.seq] + src.offset for src in ref.row_map(plan, config, rank)]
        assert mapped == ref.partitioned_indices(cu, plan.total, config.cp_size, rank,
                                                 config.cp_layout)


def test_spec_example_zigzag_cp2() -> None:
    """R-CONSUMER-6: spec §13.2 by hand: segments 4 and 8, chunks 1 and 2."""
    assert ref.partitioned_indices([0, 4, 12], 12, 2, 0) == [0, 3, 4, 5, 10, 11]
    assert ref.partitioned_indices([0, 4, 12], 12, 2, 1) == [1, 2, 6, 7, 8, 9]


@pytest.mark.parametrize(
    ("bounds", "total", "cp", "layout", "message"),
    [
        ([0, 6], 6, 2, "zigzag", "segment 0 has 6 rows, not divisible by 2 * cp_size = 4"),
        ([0, 4, 3], 3, 1, "zigzag", "decreases at entry 2"),
        ([1, 4], 4, 1, "zigzag", "must start at 0"),
        ([], 0, 1, "zigzag", "must start at 0"),
        ([0, 4], 8, 1, "zigzag", "!= total 8"),
        ([0, 5], 5, 2, "contiguous", "not divisible by cp_size 2"),
        ([0, 4], 4, 1, "ring", "cp_layout must be one of"),
        ([0, 2**31], 2**31, 1, "zigzag", "exceeds int32"),
    ],
)
def test_rejections(bounds: list[int], total: int, cp: int, layout: str, message: str) -> None:
    """R-CONSUMER-1, R-CONSUMER-2, R-CONSUMER-3: a buffer TE cannot partition is a ValueError
    naming the segment or entry, never a silently wrong index list."""
    with pytest.raises(ValueError, match=message.replace("*", r"\*")):
        ref.partitioned_indices(bounds, total, cp, 0, layout)


def test_rank_is_validated() -> None:
    """R-CONSUMER-6: cp_rank outside [0, cp) names the value."""
    with pytest.raises(ValueError, match="cp_rank must be in"):
        ref.partitioned_indices([0, 4], 4, 2, 2)
