"""The plan: integers alone that describe a pack, the same on every rank (spec §4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .alignment import padded_lengths, total_length
from .config import PackConfig
from .validation import INT32_MAX, as_length


@dataclass(frozen=True)
class Plan:
    """R-META-1..5. Arrays are int32; the scalars are Python ints."""

    seqlens: np.ndarray
    seqlens_padded: np.ndarray
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    max_seqlen: int
    total: int
    local_rows: int

    @property
    def batch_size(self) -> int:
        return len(self.seqlens)


def _check_seqlens(seqlens: Any) -> list[int]:
    """R-ERR-1, R-ERR-6, R-ERR-7, R-ERR-8 on the lengths."""
    if isinstance(seqlens, np.ndarray):
        if seqlens.ndim != 1:
            raise ValueError(f"seqlens must be 1-D, got shape {seqlens.shape}")
        values: Sequence[Any] = list(seqlens)
    elif isinstance(seqlens, list | tuple):
        values = seqlens
    else:
        raise TypeError(
            f"seqlens must be a list, tuple or 1-D array, got {type(seqlens).__name__}"
        )
    if len(values) == 0:
        raise ValueError("the batch is empty: seqlens has no sequence (B must be >= 1)")
    checked = []
    for index, value in enumerate(values):
        checked.append(as_length(index, value))
    return checked


def plan_thd(seqlens: Any, config: PackConfig) -> Plan:
    """Build the plan (R-ALIGN-3, R-TOTAL-1..6, R-META-1..5).

    The plan meets the consumer contract (§12a) by construction: `cu_seqlens_padded` starts at
    0, never decreases and ends at `total <= INT32_MAX` (R-CONSUMER-1); `A` divides every P_i
    and is a multiple of tp * cp * f, so zigzag segments split into 2 * cp chunks
    (R-CONSUMER-2) and `local_rows = T / cp` splits by tp (R-CONSUMER-3, R-CONSUMER-4); with
    FP8, F = 128 * A0 divides T, so local_rows / tp is a multiple of 128 (R-CONSUMER-5);
    `cu_seqlens` has the real lengths L_i <= P_i (R-CONSUMER-8); `max_seqlen = max(P_i)`
    (R-CONSUMER-9).
    """
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    lengths = _check_seqlens(seqlens)

    # R-ALIGN-3: per-sequence alignment.
    padded = padded_lengths(lengths, config.sequence_align)
    # R-TOTAL-3, R-TOTAL-4: the total.
    total = total_length(padded, config.cp_size, config.min_local_rows, config.total_modulus)
    # R-TOTAL-6, R-ERR-8.
    if total > INT32_MAX:
        raise ValueError(f"total rows {total} exceed int32 (max {INT32_MAX})")
    # R-TOTAL-5: every row the total-level stages add goes onto the last sequence.
    padded[-1] += total - sum(padded)

    # R-META-2, R-META-3: cumulative boundaries.
    cu_seqlens = [0]
    cu_seqlens_padded = [0]
    for length, padded_length in zip(lengths, padded, strict=True):
        cu_seqlens.append(cu_seqlens[-1] + length)
        cu_seqlens_padded.append(cu_seqlens_padded[-1] + padded_length)
    assert cu_seqlens_padded[-1] == total

    return Plan(
        seqlens=np.array(lengths, dtype=np.int32),  # R-META-1
        seqlens_padded=np.array(padded, dtype=np.int32),  # R-META-1
        cu_seqlens=np.array(cu_seqlens, dtype=np.int32),  # R-META-2
        cu_seqlens_padded=np.array(cu_seqlens_padded, dtype=np.int32),  # R-META-3
        max_seqlen=max(padded),  # R-META-4
        total=total,  # R-META-5
        local_rows=total // config.cp_size,  # R-META-5
    )
