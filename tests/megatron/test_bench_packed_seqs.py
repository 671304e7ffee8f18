"""bench/packed_seqs.py: its floor gathers the same rows as the pack, and a tiny run reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import impl

pytest.importorskip("megatron.core")
from bench import packed_seqs  # noqa: E402


@pytest.mark.rules("R-MEG-8")
@pytest.mark.parametrize("pattern", packed_seqs.PATTERNS)
def test_floor_gathers_the_packed_rows(pattern: str) -> None:
    """The floor's index reads, on every real row, the token the pack puts there (padding rows
    read row 0 and are not compared): the floor does the pack's gather and nothing else."""
    mask = packed_seqs.make_mask(pattern, 6, 64, np.random.default_rng(1))
    x = torch.arange(1, 6 * 64 + 1).reshape(6, 64)
    config = impl.PackConfig(cp_size=2)
    rows, _, plan = impl.pack_thd(x, config, 0, mask=mask)
    floor = x.view(-1).index_select(0, packed_seqs.floor_index(mask, config))
    real = rows != 0  # tokens are non-zero, padding rows hold 0
    assert bool(real.any()) and torch.equal(floor[real], rows[real])


@pytest.mark.rules("R-MEG-8")
def test_tiny_run_reports_every_time_and_ratio() -> None:
    case = packed_seqs.run_case("scattered", "ids", 4, 32, 2, 2, None, 1, seed=0)
    assert set(case["times"]) == {"impl", "adapter", "floor", "mask_lengths"}
    assert case["ratios"]["verl_over_impl"] is None and case["ratios"]["impl_over_floor"] > 0
    assert "| scattered | ids |" in packed_seqs.table([case])
