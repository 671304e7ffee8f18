"""The plan: integers alone that describe a pack, the same on every rank (spec §4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .alignment import padded_lengths, total_length
from .config import PackConfig
from .segments import check_num_seqs, place_tail, plan_max_seqlen, static_entries
from .validation import INT32_MAX, as_length


@dataclass(frozen=True)
class Plan:
    """R-META-1..7. Arrays are int32 with one entry per segment (K >= B, R-TAIL-1,
    R-STATIC-1); the scalars are Python ints.

    `num_seqs` is B (R-META-7). Left out (0, never a valid B: R-ERR-7) it is len(seqlens):
    a plan built by a 1.0 caller has K = B.
    """

    seqlens: np.ndarray
    seqlens_padded: np.ndarray
    cu_seqlens: np.ndarray
    cu_seqlens_padded: np.ndarray
    max_seqlen: int
    total: int
    local_rows: int
    num_seqs: int = 0

    def __post_init__(self) -> None:
        if self.num_seqs == 0:
            object.__setattr__(self, "num_seqs", len(self.seqlens))

    @property
    def batch_size(self) -> int:
        """B, the number of real sequences (R-META-7); len(seqlens) is K."""
        return self.num_seqs

    @property
    def num_segments(self) -> int:
        """K, the segments the buffer is cut into (R-META-1)."""
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
    """Build the plan (R-ALIGN-3, R-TOTAL-1..6, R-TAIL-1, R-STATIC-1..2, R-META-1..7).

    The plan meets the consumer contract (§12a) by construction: `cu_seqlens_padded` starts at
    0, never decreases and ends at `total <= INT32_MAX` (R-CONSUMER-1); `A` divides every P_i
    and is a multiple of tp * cp * f, so zigzag segments split into 2 * cp chunks
    (R-CONSUMER-2), and so is T - S, which the tail segment carries; tp * cp divides M, so
    `local_rows = T / cp` splits by tp (R-CONSUMER-3, R-CONSUMER-4); with FP8, F divides T, so
    local_rows / tp is a multiple of q (R-CONSUMER-5); `cu_seqlens` has the real lengths
    L_k <= P_k, 0 past the B sequences (R-CONSUMER-7, R-CONSUMER-8); `max_seqlen` is max(P_k)
    or T, both >= every P_k (R-CONSUMER-9).

    With a bucket, max_num_seqs = N and max_seqlen="total", the array lengths are N and N + 1
    and every int (total, local_rows, max_seqlen) is a function of T, a multiple of M: batches
    whose totals meet in one bucket give one set of shapes and ints (R-STATIC-3).
    """
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    lengths = _check_seqlens(seqlens)
    # R-ERR-13: from B alone, before any length is used.
    check_num_seqs(len(lengths), config.tail, config.max_num_seqs)

    # R-ALIGN-3: per-sequence alignment.
    padded = padded_lengths(lengths, config.sequence_align)
    # R-TOTAL-3, R-TOTAL-4: the total.
    # R-TOTAL-7, R-ERR-15: with fixed_total, exactly N, or an error before any data is read.
    total = total_length(
        padded, config.cp_size, config.min_local_rows, config.total_modulus, config.fixed_total
    )
    # R-TOTAL-6, R-ERR-8.
    if total > INT32_MAX:
        raise ValueError(f"total rows {total} exceed int32 (max {INT32_MAX})")
    # R-TOTAL-5 (tail="last"), R-TAIL-1 ("segment") or R-TAIL-3 ("tokens"): where T - S goes.
    seg_lengths, seg_padded = place_tail(
        lengths, padded, total, config.tail, config.max_num_seqs
    )
    # R-STATIC-1: zero-length entries up to max_num_seqs.
    seg_lengths, seg_padded = static_entries(seg_lengths, seg_padded, config.max_num_seqs)

    # R-META-8: zero-length sequences keep their segments (the spec's packs never omit them;
    # a target that declares it does is judged by R-CONSUMER-14).
    # R-META-2, R-META-3: cumulative boundaries over the K segments.
    cu_seqlens = [0]
    cu_seqlens_padded = [0]
    for length, padded_length in zip(seg_lengths, seg_padded, strict=True):
        cu_seqlens.append(cu_seqlens[-1] + length)
        cu_seqlens_padded.append(cu_seqlens_padded[-1] + padded_length)
    assert cu_seqlens_padded[-1] == total

    return Plan(
        seqlens=np.array(seg_lengths, dtype=np.int32),  # R-META-1
        seqlens_padded=np.array(seg_padded, dtype=np.int32),  # R-META-1
        cu_seqlens=np.array(cu_seqlens, dtype=np.int32),  # R-META-2
        cu_seqlens_padded=np.array(cu_seqlens_padded, dtype=np.int32),  # R-META-3
        max_seqlen=plan_max_seqlen(seg_padded, total, config.max_seqlen),  # R-META-4, R-STATIC-2
        total=total,  # R-META-5
        local_rows=total // config.cp_size,  # R-META-5
        num_seqs=len(lengths),  # R-META-7
    )
