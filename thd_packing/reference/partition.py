"""TE's partition of a padded THD buffer across CP ranks, from `cu_seqlens_padded` alone (§12a).

This is what the consumers do with a pack, whatever convention made it: the consumer contract's
checks (`conformance/contract.py`) place a target's rows through it, never through the plan.
The model tier (§12c) reads a pack's rows through the same arithmetic (with TE's integer
division where a segment is not divisible): a pack of this reference, run through a causal LM
by position ids (R-MODEL-1), THD metadata (R-MODEL-2) or CP attention (R-MODEL-3), gives every
real token the log-probs of its sequence run alone, and the loss (R-MODEL-4) and gradients
(R-MODEL-5) of the unpacked batch.
"""

from __future__ import annotations

from typing import Any

from .validation import INT32_MAX, as_cp_rank

LAYOUTS = ("zigzag", "contiguous")


def _boundaries(cu_seqlens_padded: Any, total: int) -> list[int]:
    """R-CONSUMER-1: starts at 0, never decreases, fits int32, ends at the total."""
    bounds = [int(value) for value in cu_seqlens_padded]
    if not bounds or bounds[0] != 0:
        raise ValueError(f"cu_seqlens_padded must start at 0, got {bounds[:4]}")
    for k in range(len(bounds) - 1):
        if bounds[k + 1] < bounds[k]:
            raise ValueError(
                f"cu_seqlens_padded decreases at entry {k + 1}: {bounds[k]} -> {bounds[k + 1]}"
            )
    if bounds[-1] > INT32_MAX:
        raise ValueError(f"cu_seqlens_padded[-1] = {bounds[-1]} exceeds int32")
    if bounds[-1] != total:
        raise ValueError(f"cu_seqlens_padded[-1] = {bounds[-1]} != total {total}")
    return bounds


def partitioned_indices(
    cu_seqlens_padded: Any, total: int, cp_size: int, cp_rank: int, cp_layout: str = "zigzag"
) -> list[int]:
    """The global rows rank `cp_rank` holds, in order (R-CONSUMER-6).

    Zigzag (cp_size > 1): for every segment in order, chunk `cp_rank`, then chunk
    `2 * cp_size - 1 - cp_rank`, of `segment / (2 * cp_size)` rows: what TransformerEngine's
    `thd_get_partitioned_indices(cu_seqlens_padded, total, cp_size, cp_rank)` returns. A segment
    that `2 * cp_size` does not divide raises ValueError (R-CONSUMER-2): TE only asserts it in a
    CUDA kernel. Contiguous: the slice `[cp_rank * n, (cp_rank + 1) * n)`, `n = total / cp_size`
    (R-CONSUMER-3). `cp_size == 1`: every row.
    """
    if cp_layout not in LAYOUTS:
        raise ValueError(f"cp_layout must be one of {LAYOUTS}, got {cp_layout!r}")
    if isinstance(cp_size, bool) or not isinstance(cp_size, int) or cp_size < 1:
        raise ValueError(f"cp_size must be an int >= 1, got {cp_size!r}")
    rank = as_cp_rank(cp_rank, cp_size)
    bounds = _boundaries(cu_seqlens_padded, total)
    if total % cp_size != 0:
        raise ValueError(f"total {total} is not divisible by cp_size {cp_size} (R-CONSUMER-3)")
    local_rows = total // cp_size

    if cp_size == 1:
        return list(range(total))
    if cp_layout == "contiguous":
        return list(range(rank * local_rows, (rank + 1) * local_rows))

    rows = []
    for k in range(len(bounds) - 1):
        start, length = bounds[k], bounds[k + 1] - bounds[k]
        if length % (2 * cp_size) != 0:
            raise ValueError(
                f"segment {k} has {length} rows, not divisible by 2 * cp_size = {2 * cp_size} "
                "(R-CONSUMER-2)"
            )
        chunk = length // (2 * cp_size)
        for chunk_index in (rank, 2 * cp_size - 1 - rank):
            for offset in range(chunk_index * chunk, (chunk_index + 1) * chunk):
                rows.append(start + offset)
    assert len(rows) == local_rows
    return rows
