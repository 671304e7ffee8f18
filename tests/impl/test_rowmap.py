"""impl's row map (impl/rowmap.py, `row_sources`) against the reference's, row by row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from thd_packing import reference
from thd_packing.conformance.protocol import plain_meta
from thd_packing.conformance.running import ref_config
from thd_packing.conformance.strategies import configs
from thd_packing.conformance.under_test import RuleViolation

from ._impl_api import CAPS, IMPL, ci_settings


@pytest.mark.rules("R-SHARD-1", "R-SHARD-2", "R-SHARD-3", "R-ALIGN-4")
@ci_settings(0.5)
@example([3, 0, 5], {"cp_size": 2})
@example([7], {"cp_size": 3, "cp_layout": "contiguous", "min_local_rows": 5})
@given(st.lists(st.integers(0, 200), min_size=1, max_size=12),
       configs(caps=CAPS))
def test_row_map_matches_reference(seqlens: list[int], config: dict[str, Any]) -> None:
    """The target's row map equals the reference's, row by row, on the
    reference's plan: the sharding compared without data, so a wrong map is found even where
    the values happen to coincide."""
    cfg = ref_config(config)
    plan = reference.plan_thd(seqlens, cfg)
    meta = plain_meta(plan)
    if cfg.cp_size == 1:
        shard_rule = "R-SHARD-1"
    else:
        shard_rule = "R-SHARD-2" if cfg.cp_layout == "zigzag" else "R-SHARD-3"
    for rank in range(cfg.cp_size):
        seq, offset, real = (np.asarray(a) for a in
                             IMPL.row_map(dict(meta), dict(config), rank))
        want = reference.row_map(plan, cfg, rank)
        where = f"seqlens={seqlens}, config={config}, rank {rank}"
        if not len(seq) == len(offset) == len(real) == len(want):
            raise RuleViolation(f"{where}: row map has {len(seq)} rows, the spec "
                                f"{len(want)}", {shard_rule})
        for k, src in enumerate(want):
            if (int(seq[k]), int(offset[k])) != (src.seq, src.offset):
                raise RuleViolation(
                    f"{where}: local row {k} comes from sequence {int(seq[k])} offset "
                    f"{int(offset[k])}, the spec says sequence {src.seq} offset {src.offset}",
                    {shard_rule})
            if bool(real[k]) != src.real:
                raise RuleViolation(
                    f"{where}: local row {k} (sequence {src.seq}, offset {src.offset}) is marked "
                    f"real={bool(real[k])}, the spec says {src.real}", {"R-ALIGN-4"})
