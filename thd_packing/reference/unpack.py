"""Unpack: the exact inverse of pack over all ranks (spec §9)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import PackConfig
from .plan import Plan
from .rowmap import row_map


def unpack_thd(shards: Any, plan: Plan, config: PackConfig) -> list[np.ndarray]:
    """Scatter every rank's real rows back to their sequences (R-UNPACK-1..3).

    Because the row maps cover every real (i, j) exactly once (R-SHARD-4), this inverts
    pack exactly (R-UNPACK-2), from the plan pack returned (R-CONSUMER-13).
    """
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
    if not isinstance(shards, list | tuple):
        raise TypeError(f"shards must be a list or tuple of arrays, got {type(shards).__name__}")
    # R-ERR-11: every check before any data is read.
    if len(shards) != config.cp_size:
        raise ValueError(f"expected {config.cp_size} shards (cp_size), got {len(shards)}")
    if plan.total != plan.local_rows * config.cp_size:
        raise ValueError(
            f"plan.total {plan.total} != local_rows {plan.local_rows} * cp_size {config.cp_size}"
        )
    if not 1 <= plan.num_seqs <= plan.num_segments or any(
        int(length) != 0 for length in plan.seqlens[plan.num_seqs :]
    ):
        # R-ERR-11 (a forged plan): segments past B (R-TAIL-1, R-STATIC-1) are padding only.
        raise ValueError(
            f"plan.num_seqs {plan.num_seqs} does not fit its {plan.num_segments} segments, or a "
            "segment past num_seqs has real rows"
        )
    for rank, shard in enumerate(shards):
        if not isinstance(shard, np.ndarray):
            raise TypeError(f"shards[{rank}] must be a numpy array, got {type(shard).__name__}")
        if shard.ndim == 0 or shard.shape[0] != plan.local_rows:
            raise ValueError(
                f"shards[{rank}] has shape {shard.shape}, expected {plan.local_rows} rows"
            )
        if shard.shape[1:] != shards[0].shape[1:] or shard.dtype != shards[0].dtype:
            raise ValueError(
                f"shards[{rank}] has trailing shape {shard.shape[1:]} and dtype {shard.dtype}, "
                f"expected {shards[0].shape[1:]} and {shards[0].dtype} (as shards[0])"
            )

    trail = shards[0].shape[1:]
    # R-UNPACK-1: the B real sequences; segments k >= B (R-TAIL-1, R-STATIC-1) hold no real row.
    out = [
        np.empty((int(plan.seqlens[seq]), *trail), dtype=shards[0].dtype)
        for seq in range(plan.num_seqs)
    ]
    for rank, shard in enumerate(shards):
        for k, source in enumerate(row_map(plan, config, rank)):
            if source.real:  # R-UNPACK-3: padding rows are ignored
                out[source.seq][source.offset] = shard[k]  # R-UNPACK-1
    return out
