"""The label conventions and the loss mask (spec §8, §8a).

`labels="roll"` is verl's in-pack roll (R-ROLL-*); `labels="ignore"` writes `ignore_index`
where no next token exists (R-LABEL-1). The loss mask depends on the plan and the rank alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # config.py reads LABELS from here
    from .config import PackConfig
    from .plan import Plan

LABELS = ("roll", "ignore")


def input_position_ids(config: PackConfig, need_roll: bool) -> bool:
    """Whether position ids are the inputs' (R-POS-2): without need_roll, and with need_roll
    under labels="ignore", whose labels line up row for row with the inputs (R-LABEL-1)."""
    return not need_roll or config.labels == "ignore"


def loss_mask(plan: Plan, config: PackConfig, cp_rank: int) -> np.ndarray:
    """R-LABEL-3: bool `[local_rows]`, True exactly at the real rows (i, j) with j < L_i - 1,
    the rows whose label (need_roll, either convention) is a real next token of their own
    sequence (R-ROLL-1, R-LABEL-1, R-CONSUMER-11)."""
    from .rowmap import row_map

    sources = row_map(plan, config, cp_rank)
    mask = np.zeros(len(sources), dtype=bool)
    for k, source in enumerate(sources):
        length = int(plan.seqlens[source.seq])
        if source.real and source.offset < length - 1:
            mask[k] = True  # R-LABEL-3: a next token exists
    return mask
