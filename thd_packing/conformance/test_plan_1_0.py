"""A plan of spec 1.0 has no `num_seqs` (R-META-7 is new in 1.1.0) and one entry per sequence
(K = B). Under 1.1's default conventions every 1.0 plan is unchanged, so such a plan must still
unpack into its len(seqlens) sequences: the meta handed to the target leaves the key out, and
the target's own default for a plan without B decides."""

from __future__ import annotations

from typing import Any

import pytest

from thd_packing import reference

from .compare import check_unpack_returns_batch
from .running import META_ARRAYS
from .strategies import Batch
from .under_test import needs, require_config

# Default conventions only (tail="last", no max_num_seqs): K = B, with and without total-level
# padding on the last sequence, empty sequences first, inside and last.
CASES = [
    ({"cp_size": 2}, (5, 0, 3)),
    ({"cp_size": 2, "bucket": 16}, (5, 3)),
    ({"tp_size": 2}, (1,)),
    ({}, (0, 4, 4, 0)),
    ({"cp_size": 3, "cp_layout": "contiguous", "min_local_rows": 5}, (2, 7)),
]


@needs("unpack")
@pytest.mark.rules("R-META-7", "R-UNPACK-1")
@pytest.mark.parametrize(("config", "lengths"), CASES,
                         ids=["cp2", "cp2-bucket", "tp2-one", "empty-ends", "contiguous-mlr"])
def test_unpack_plan_without_num_seqs(config: dict[str, Any], lengths: tuple[int, ...]) -> None:
    """The spec's shards and plan, the plan without `num_seqs`: unpack returns the B =
    len(seqlens) input sequences, bit for bit (a target that takes a missing B as 0 returns none
    or rejects the plan)."""
    require_config(config, lengths=list(lengths))
    cfg = reference.PackConfig(**config)
    seqs = Batch(lengths).arrays()
    plan = reference.plan_thd(list(lengths), cfg)
    assert len(plan.seqlens) == len(seqs), f"{config}: not a 1.0 plan (K != B)"
    shards = [reference.pack_thd(seqs, cfg, rank)[0] for rank in range(cfg.cp_size)]
    meta = {k: getattr(plan, k) for k in (*META_ARRAYS, "max_seqlen", "total", "local_rows")}
    what = f"unpack of a 1.0 plan (no num_seqs), config={config}, lengths={lengths}"
    check_unpack_returns_batch(what, shards, meta, config, seqs,
                               rules={"R-META-7", "R-UNPACK-1"},
                               count_rules={"R-META-7", "R-UNPACK-1"})
