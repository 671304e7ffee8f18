# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""verl 0.9.1's values in the slots the spec leaves unspecified (R-MEG-4, R-MEG-5).

`pack_thd` may put anything on a padding row's position id (R-POS-3) and on a sequence's last
real row under `need_roll` (R-ROLL-2). A drop-in for verl must give verl's value wherever that
value is deterministic and no erratum applies, so the Megatron adapter corrects those slots after
`pack_batch`: one `masked_fill_` of position ids (to 0), one `index_put_` of at most two position
ids per sequence, one `index_copy_` of at most one label row per sequence (the last two also
when empty, so the op count does not depend on the data). The table is built on
the host from the plan's lengths with a constant number of CPU tensor ops, so the correction
keeps impl's fixed op count and does no device-to-host copy. No row is gathered twice: the
packer is impl's, this only overwrites slots.
"""

from __future__ import annotations

import torch

from .pack import as_dtype, bits_view
from .rowmap import second_sums

_EMPTY = torch.zeros(0, dtype=torch.int64)


class SlotFix:
    """Host (CPU int64) corrections of one rank's rows: position ids set to 0 on the local row
    intervals `[zero_a[m], zero_b[m])`, position id `pos_vals[m]` at `pos_rows[m]`, and the label
    row `copy_dst[m]` copied from row `copy_src[m]` of the batch's values buffer."""

    def __init__(self, zero_a: torch.Tensor, zero_b: torch.Tensor, pos_rows: torch.Tensor,
                 pos_vals: torch.Tensor, copy_dst: torch.Tensor, copy_src: torch.Tensor) -> None:
        self.zero_a, self.zero_b = zero_a, zero_b
        self.pos_rows, self.pos_vals = pos_rows, pos_vals
        self.copy_dst, self.copy_src = copy_dst, copy_src


def slot_fixes(lengths: torch.Tensor, padded: torch.Tensor, cu_padded: torch.Tensor,
               src_start: torch.Tensor, cp: int, layout: str, rank: int, local_rows: int,
               need_roll: bool) -> SlotFix:
    """verl's slot values for rank `rank` (R-MEG-4, R-MEG-5), from CPU int64 plan arrays.

    Offsets `j` of sequence `i` (length `L`, padded length `P`); the slots are the padding rows
    (`j >= L`), and under `need_roll` also `j = L - 1`.

    - cp = 1 or contiguous: every slot's position id is 0 (verl writes only real rows; under
      `need_roll` its contiguous path takes source `(j + 1) % L`, and its cp = 1 roll brings the
      next row's id, a sequence start's 0). The last real row's label: contiguous `x_i[0]`;
      zigzag cp = 1 the next buffer row's token when `P = L` (the next non-empty segment's first
      token, cyclically), the padding 0 otherwise.
    - zigzag cp > 1 (chunk `c = P / 2cp`): position ids count on over the rank's first chunk
      (`j`, or `j + 1` under `need_roll` except `j` at the chunk's last row) and are 0 on the
      second chunk's slots, except under `need_roll` on rank r > 0 where the second chunk ends on
      `j = L - 1` (id `L - 1`). The last real row's label is `x_i[0]` on rank 0 when `L = P`,
      else the padding 0.
    """
    shift = 1 if need_roll else 0
    start = cu_padded[:-1]
    pos_rows, pos_vals, copy_dst, copy_src = _EMPTY, _EMPTY, _EMPTY, _EMPTY
    if cp == 1 or layout == "contiguous":
        lo = rank * local_rows
        zero_a = (start + (lengths - shift).clamp(min=0) - lo).clamp(0, local_rows)
        zero_b = (start + padded - lo).clamp(0, local_rows)
        if need_roll:
            last = start + lengths - 1 - lo
            has = (lengths > 0) & (last >= 0) & (last < local_rows)
            if layout == "contiguous":
                src = src_start
            else:  # verl's torch.roll: the next row of the buffer, cyclically
                total = max(int(cu_padded[-1]), 1)
                nxt = torch.searchsorted(cu_padded[1:], (start + padded) % total, right=True)
                nxt = nxt.clamp(max=lengths.numel() - 1)
                has &= (padded == lengths) & (lengths[nxt] > 0)
                src = src_start[nxt]
            copy_dst, copy_src = last[has], src[has]
    else:
        c = torch.div(padded, 2 * cp, rounding_mode="floor")
        local = torch.div(start, cp, rounding_mode="floor")
        second = padded - (rank + 1) * c  # offset of the second chunk's first row
        zero_a = local + c + torch.minimum((lengths - shift - second).clamp(min=0), c)
        zero_b = local + 2 * c
        if need_roll:
            end1 = (rank + 1) * c - 1
            m1 = (c > 0) & (end1 >= lengths - 1)
            m2 = (c > 0) & (lengths > 0) & (lengths == padded - rank * c) if rank > 0 else None
            rows = [(local + c - 1)[m1]]
            vals = [end1[m1]]
            if m2 is not None:
                rows.append((local + 2 * c - 1)[m2])
                vals.append((lengths - 1)[m2])
            pos_rows, pos_vals = torch.cat(rows), torch.cat(vals)
            if rank == 0:
                m3 = (lengths > 0) & (lengths == padded)
                copy_dst, copy_src = (local + 2 * c - 1)[m3], src_start[m3]
    return SlotFix(zero_a, zero_b, pos_rows, pos_vals, copy_dst, copy_src)


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t if device.type == "cpu" else t.to(device=device, non_blocking=True)


def apply_slots(fix: SlotFix, rows: torch.Tensor, pos: torch.Tensor,
                values: torch.Tensor | None) -> None:
    """Write `fix` into one rank's `rows` and `pos` in place (a fixed number of ops, no sync)."""
    n = pos.shape[0]
    device = pos.device
    if bool((fix.zero_b > fix.zero_a).any()):
        a, b = fix.zero_a, fix.zero_b
        at = torch.cat((a, a + 1, b, b + 1))
        z = torch.cat((torch.ones_like(a), -torch.ones_like(a), -torch.ones_like(b),
                       torch.ones_like(b)))
        mask = second_sums(n, at, z, torch.int8, device).view(torch.bool)
        pos.masked_fill_(mask, 0)
    # Unconditional (an empty index is a no-op), so the op count does not depend on the data.
    pos.index_put_((_to(fix.pos_rows, device),), _to(fix.pos_vals, device))
    if values is None:
        if fix.copy_dst.numel():
            raise AssertionError("label slots need the batch's values buffer")
        return
    view = bits_view(rows.dtype)
    src = as_dtype(values, view).index_select(0, _to(fix.copy_src, device))
    as_dtype(rows, view).index_copy_(0, _to(fix.copy_dst, device), src)
