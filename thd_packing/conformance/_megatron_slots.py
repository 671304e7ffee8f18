"""The oracle of the Megatron adapter's slot rules (spec section 12, R-MEG-6, R-MEG-7).

Written row by row from the rules' text over the reference's row map (a literal loop, like
reference/): for each local row of a rank, what verl 0.9.1 puts in the slots that `pack_thd`
leaves unspecified. A row that is no slot maps to nothing (the spec's own rules judge it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from thd_packing import reference
from thd_packing.reference.rowmap import row_map


def _next_segment_token(plan: Any, seqs: list[np.ndarray], i: int) -> Any:
    """zigzag cp = 1 under need_roll: the token of the buffer row after sequence i's segment,
    cyclically (verl rolls the whole buffer by one row); 0 when that row is padding."""
    total = int(plan.total)
    row = (int(plan.cu_seqlens_padded[i]) + int(plan.seqlens_padded[i])) % total
    for k in range(len(seqs)):
        lo, hi = int(plan.cu_seqlens_padded[k]), int(plan.cu_seqlens_padded[k + 1])
        if lo <= row < hi:
            return seqs[k][row - lo] if row - lo < len(seqs[k]) else 0
    raise AssertionError("a row outside every segment")


def slot_values(seqs: list[np.ndarray], cfg: reference.PackConfig, rank: int,
                need_roll: bool) -> dict[int, tuple[int, np.ndarray | None]]:
    """{local row: (position id, label)} of every slot of rank `rank`.

    The label is given for the last real row under need_roll only (a row of the batch, or the
    pad value 0 as a row of zeros); None on padding rows, whose value R-ROW-2 / E-4 govern.
    """
    plan = reference.plan_thd([len(s) for s in seqs], cfg)
    cp, zigzag = cfg.cp_size, cfg.cp_layout == "zigzag"
    out: dict[int, tuple[int, np.ndarray | None]] = {}
    for k, src in enumerate(row_map(plan, cfg, rank)):
        i, j = src.seq, src.offset
        n, p = len(seqs[i]), int(plan.seqlens_padded[i])
        last = need_roll and j == n - 1
        if j < n and not last:
            continue
        value: Any = 0
        if zigzag and cp > 1:
            c = p // (2 * cp)
            first = rank * c <= j < (rank + 1) * c
            if not need_roll:
                pos = j if first else 0  # R-MEG-6: verl counts on over the first chunk only
            elif first:
                pos = j if j == (rank + 1) * c - 1 else j + 1
            else:
                pos = j if rank > 0 and last and j == p - rank * c - 1 else 0
            if last and rank == 0 and n == p:
                value = seqs[i][0]  # rank 0's second chunk ends the sequence: verl's d[0]
        else:
            pos = 0  # R-MEG-6: verl writes only the real rows' ids (and 0 for the wrap)
            if last and not zigzag:
                value = seqs[i][0]  # contiguous: source (j + 1) % L
            elif last and n == p:
                value = _next_segment_token(plan, seqs, i)
        label = None
        if last:
            label = np.zeros_like(seqs[i][0]) if value is None or (
                isinstance(value, int) and value == 0) else np.asarray(value)
        out[k] = (pos, label)
    return out
