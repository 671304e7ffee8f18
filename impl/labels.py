# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""`loss_mask`: where a rank's next-token labels are real (spec §8a, R-LABEL-3).

It depends on the plan and the rank alone: the chunk table of the rolled row map (a chunk's
real rows are those with a next token, `plan_chunks(shift=1)`) expanded into a step function,
with no pass over the data and no per-sequence Python loop.
"""

from __future__ import annotations

from typing import Any

import torch

from .config import PackConfig, as_integer
from .plan import Plan
from .rowmap import expand, plan_chunks


def loss_mask(
    plan: Plan, config: PackConfig, cp_rank: int, device: Any = None
) -> torch.Tensor:
    """Bool `[local_rows]` on `device` (CPU by default), True exactly at the real rows
    `(i, j)` with `j < L_i - 1`: where the label `pack_thd(..., need_roll=True)` writes is a
    real next token of its own sequence, under `labels="roll"` and `"ignore"` alike."""
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
    rank = as_integer("cp_rank", cp_rank)
    if not 0 <= rank < config.cp_size:
        raise ValueError(f"cp_rank must be in [0, {config.cp_size}), got cp_rank={rank}")
    if plan.total != plan.local_rows * config.cp_size:
        raise ValueError(f"plan.total {plan.total} != local_rows {plan.local_rows} * cp_size "
                         f"{config.cp_size}")
    ch = plan_chunks(plan, config, rank, 1)  # a row is real iff it has a next token
    where = torch.device("cpu") if device is None else torch.device(device)
    starts = torch.stack((ch.starts, ch.starts + ch.real), dim=1).view(-1)
    flags = torch.tensor([1, 0]).repeat(ch.starts.numel())
    mask = expand(plan.local_rows, starts, flags, slope=0, dtype=torch.int8, device=where)
    return mask.view(torch.bool)
