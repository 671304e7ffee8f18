# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 1.0.1
"""Row maps as chunk tables, and their expansion into per-row indices (spec §5, §7, §8, §9).

A rank's local rows are a concatenation of *chunks*, one or two per sequence: runs of rows whose
offsets are consecutive within one padded sequence (its real rows, then its padding rows). The
chunk table has O(B) entries and is built on the host with a constant number of CPU tensor ops.
A per-row quantity that is `k + D_m` on chunk `m` (a ramp; `k` is the row) or `D_m` (a step) is
expanded on the target device with three ops and one buffer: fill with the slope, add
`D_m - D_{m-1}` at each chunk start (accumulating, so empty chunks need no filtering on the
host), cumulative sum in place.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .config import INT32_MAX


def exclusive_cumsum(x: torch.Tensor) -> torch.Tensor:
    """`[0, x0, x0 + x1, ...]` without the total: where each run starts."""
    return torch.cumsum(x, 0) - x


class Chunks:
    """Host chunk table of one rank (CPU int64, [B * K], in local row order).

    A chunk is the run of a rank's rows that one sequence contributes (R-SHARD-1..3): `real`
    real rows, then `pad` padding rows. On the whole chunk, real and padding rows alike, the
    position id is `row + d[0]` (R-POS-2) and the source row `row + d[1]`; on the padding rows
    the source row runs on past the sequence, and what is gathered there is then overwritten
    with `pad_value` (R-ROW-2). Chunks may be empty.
    """

    def __init__(
        self,
        starts: torch.Tensor,
        real: torch.Tensor,
        pad: torch.Tensor,
        d: torch.Tensor,
    ) -> None:
        self.starts = starts  # first local row; non-decreasing from 0, each <= local rows
        self.real = real
        self.pad = pad
        self.d = d  # [2, S]: pos_d, src_d


def chunk_table(
    seqlens: torch.Tensor,
    seqlens_padded: torch.Tensor,
    cu_padded: torch.Tensor,
    src_start: torch.Tensor,
    cp: int,
    layout: str,
    rank: int,
    local_rows: int,
    shift: int,
) -> Chunks:
    """Chunk table of rank `rank`'s rows (R-SHARD-1..3, R-ROW-1..2, R-POS-2, R-ROLL-1..3).

    All inputs are CPU int64. Chunk `(i, k)` covers offsets `[a, a + n)` of sequence `i`'s
    padded rows: cp = 1 one chunk, the whole padded sequence (R-SHARD-1); zigzag chunks `rank`
    and `2cp-1-rank` of `2cp` (R-SHARD-2); contiguous the intersection with the rank's global
    rows (R-SHARD-3). `src_start[i]` is where sequence `i` starts in the flat values buffer.
    With `shift = 1` (`need_roll`) the row at offset `j` takes the value and the position id of
    offset `j + 1`; it is real only if `j + 1 < L_i`, so a sequence's last real row is written
    as padding (R-ROLL-2 leaves it unspecified; we choose `pad_value`).
    """
    p = seqlens_padded
    starts = cu_padded[:-1]
    lim = seqlens - shift if shift else seqlens  # a row is real iff its offset < lim
    if cp == 1:
        first, n = starts, p
        real = lim.clamp_(min=0) if shift else lim  # a = 0, and L <= its padded length
        pos_d = -first
    else:
        if layout == "zigzag":
            # Shapes [B, 2]: the rank holds c rows of each sequence at local row
            # cu_padded / cp, then c more.
            c = torch.div(p, 2 * cp, rounding_mode="floor")
            local = torch.div(starts, cp, rounding_mode="floor")
            first = torch.stack((local, local + c), dim=1)
            a = torch.stack((c * rank, c * (2 * cp - 1 - rank)), dim=1)
            n = c[:, None]
            lim, src_start = lim[:, None], src_start[:, None]
        else:
            lo = rank * local_rows
            first = (starts - lo).clamp_(0, local_rows)
            a = (lo - starts).clamp_(min=0)
            n = (starts + p - lo).clamp_(0, local_rows) - first
        real = torch.minimum((lim - a).clamp_(min=0), n)
        pos_d = a - first
    if shift:
        pos_d += shift
    d = torch.stack((pos_d, pos_d + src_start)).view(2, -1)
    return Chunks(first.view(-1), real.view(-1), (n - real).view(-1), d)


def unpack_segments(
    seqlens: torch.Tensor,
    seqlens_padded: torch.Tensor,
    cu: torch.Tensor,
    cu_padded: torch.Tensor,
    cp: int,
    layout: str,
    local_rows: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment table of the inverse map over all ranks (R-UNPACK-1, R-SHARD-4).

    Output row `q = cu[i] + j` (token `j` of sequence `i`) reads row `q + D_m` of the ranks'
    rows concatenated in rank order. Returns (starts, D); runs may be empty (`ramps`).
    """
    if cp == 1 or layout == "contiguous":
        # Concatenating the ranks in order gives the padded buffer itself (R-SHARD-1, -3).
        return cu[:-1], cu_padded[:-1] - cu[:-1]
    q = torch.arange(2 * cp)
    c = torch.div(seqlens_padded, 2 * cp, rounding_mode="floor")[:, None]  # [B, 1]
    rank = torch.where(q < cp, q, 2 * cp - 1 - q)  # chunk q lives on rank(q) (R-SHARD-2)
    second = (q >= cp).to(torch.int64)
    local = torch.div(cu_padded[:-1], cp, rounding_mode="floor")[:, None] + second * c
    qc = q * c  # offset of chunk q in its sequence
    # Chunk q's real tokens start at output row cu + q * c; clamped to the sequence's end, the
    # starts stay non-decreasing and chunks without real tokens become empty runs.
    out_start = cu[:-1, None] + torch.minimum(qc, seqlens[:, None])
    d = rank * local_rows + local - qc - cu[:-1, None]
    return out_start.view(-1), d.view(-1)


def ramps(
    rows: int,
    starts: torch.Tensor,
    d: torch.Tensor,
    dtypes: tuple[torch.dtype, ...],
    device: torch.device,
    *,
    slope: int = 1,
) -> list[torch.Tensor]:
    """For each row `j` of `d` ([len(dtypes), S]), the per-row values `slope * k + d[j, m]` for
    row `k` in segment `m`, as a [rows] tensor of `dtypes[j]` on `device`.

    `starts` must be non-decreasing from `starts[0] == 0`, each `<= rows`: empty segments are
    allowed, their increments add up at the next non-empty one (an accumulating write, which is
    deterministic on every device). Costs one small host-to-device copy for all rows of `d`, then
    per output one fill, one indexed write and one in-place cumulative sum on `device`; no
    device-to-host synchronisation. Each buffer has one spare element, so that empty segments at
    the end have somewhere to go.
    """
    # Increment at segment m's start: d[m] - d[m-1], and d[0] - slope at row 0.
    steps = d - F.pad(d, (1, -1), value=slope)
    if device.type != "cpu":
        table = torch.cat((starts[None], steps)).to(device=device, non_blocking=True)
        starts, steps = table[0], table[1:]
    out = []
    for j, dtype in enumerate(dtypes):
        buf = torch.full((rows + 1,), slope, dtype=dtype, device=device)
        buf.index_put_((starts,), steps[j].to(dtype), accumulate=True)
        out.append(buf.cumsum_(0)[:rows])
    return out


def expand(
    rows: int,
    starts: torch.Tensor,
    d: torch.Tensor,
    *,
    slope: int,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """`ramps` for one row of segment constants `d` ([S])."""
    return ramps(rows, starts, d[None], (dtype,), device, slope=slope)[0]


def index_dtype(*bounds: int) -> torch.dtype:
    """int32 when every value and increment of an index fits in it, else int64."""
    return torch.int32 if sum(abs(b) for b in bounds) + 2 <= INT32_MAX else torch.int64


def row_sources(
    plan: Any, config: Any, cp_rank: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank `cp_rank`'s row map as CPU tensors `(seq, offset, real)`, each `[local_rows]`.

    The same map `pack_thd` gathers through (R-SHARD-1..3, R-ALIGN-4), exposed so that it can
    be compared with the reference's `row_map` without any data.
    """
    lengths = plan.seqlens.to(torch.int64)
    ch = chunk_table(
        lengths,
        plan.seqlens_padded.to(torch.int64),
        plan.cu_seqlens_padded.to(torch.int64),
        plan.cu_seqlens[:-1].to(torch.int64),
        config.cp_size,
        config.cp_layout,
        cp_rank,
        plan.local_rows,
        0,
    )
    cpu = torch.device("cpu")
    rows = plan.local_rows
    k = ch.starts.numel() // lengths.numel()  # chunks per sequence
    chunk_seq = torch.arange(lengths.numel()).repeat_interleave(k)
    offset = expand(rows, ch.starts, ch.d[0], slope=1, dtype=torch.int64, device=cpu)
    seq = expand(rows, ch.starts, chunk_seq, slope=0, dtype=torch.int64, device=cpu)
    return seq, offset, offset < lengths[seq]
