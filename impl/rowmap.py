# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 1.0.0
"""Row maps as segment tables, and their expansion into per-row indices (spec §5, §7, §8, §9).

A rank's local rows are a concatenation of *segments*: runs of rows whose source offsets are
consecutive within one sequence and which are either all real or all padding. The segment table
has O(B * chunks) entries and is built on the host with a constant number of CPU tensor ops. A
per-row quantity that is `k + D_m` on segment `m` (a ramp; `k` is the row) or `D_m` (a step) is
expanded on the target device with three ops and one buffer: fill with the slope, write
`slope + D_m - D_{m-1}` at each segment start, cumulative sum in place.
"""

from __future__ import annotations

from typing import Any

import torch

from .config import INT32_MAX


def _chunks(
    seqlens_padded: torch.Tensor,
    cu_padded: torch.Tensor,
    cp: int,
    layout: str,
    rank: int,
    local_rows: int,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Offset start `a` and length `n` of each chunk a rank holds, shape [B, K], in local order.

    R-SHARD-1 (cp = 1: one chunk, the whole padded sequence), R-SHARD-2 (zigzag: chunks `r` and
    `2cp-1-r` of `2cp`), R-SHARD-3 (contiguous: the intersection with the rank's global rows).
    """
    p = seqlens_padded
    if cp == 1:
        return torch.zeros_like(p)[:, None], p[:, None], 1
    if layout == "zigzag":
        c = torch.div(p, 2 * cp, rounding_mode="floor")
        a = torch.stack((c * rank, c * (2 * cp - 1 - rank)), dim=1)
        return a, torch.stack((c, c), dim=1), 2
    lo = rank * local_rows
    starts = cu_padded[:-1]
    a = torch.minimum((lo - starts).clamp_(min=0), p)
    end = torch.minimum((lo + local_rows - starts).clamp_(min=0), p)
    return a[:, None], (end - a)[:, None], 1


def _exclusive_cumsum(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    torch.cumsum(x[:-1], 0, out=out[1:])
    return out


class Segments:
    """Host segment table of one rank: starts and per-segment constants (CPU int64, [S])."""

    def __init__(
        self,
        starts: torch.Tensor,
        pos_d: torch.Tensor,
        idx_d: torch.Tensor,
        seq: torch.Tensor,
        real: torch.Tensor,
    ) -> None:
        self.starts = starts  # first local row of the segment
        self.pos_d = pos_d  # position id = row + pos_d (a ramp)
        self.idx_d = idx_d  # source index = row + idx_d; the index is negative on padding
        self.seq = seq  # sequence index of the segment
        self.real = real  # bool: real rows (else padding)


def pack_segments(
    seqlens: torch.Tensor,
    seqlens_padded: torch.Tensor,
    cu_padded: torch.Tensor,
    src_start: torch.Tensor,
    cp: int,
    layout: str,
    rank: int,
    local_rows: int,
    shift: int,
) -> Segments:
    """Segment table of rank `rank`'s rows (R-SHARD-1..3, R-ROW-1..2, R-POS-2, R-ROLL-1..3).

    All inputs are CPU int64. `src_start[i]` is where sequence `i` starts in the flat values
    buffer. With `shift = 1` (`need_roll`) a row at offset `j` takes the value at `j + 1` and the
    position id `j + 1`; the row is real only if `j + 1 < L_i`, so a sequence's last real row
    is written as padding (R-ROLL-2 leaves it unspecified; we choose `pad_value`).
    """
    a, n, k = _chunks(seqlens_padded, cu_padded, cp, layout, rank, local_rows)
    lim = (seqlens - shift).clamp_(min=0)[:, None]  # real iff offset < lim
    n_real = torch.minimum((lim - a).clamp_(min=0), n)
    # sub-segments per chunk: [real, pad] -> shape [B, K, 2], flattened in local row order
    lens = torch.stack((n_real, n - n_real), dim=2).reshape(-1)
    starts = _exclusive_cumsum(lens)
    chunk_start = starts.view(-1, k, 2)[:, :, 0]
    pos_d = (a + shift - chunk_start)[:, :, None].expand(-1, -1, 2).reshape(-1)
    real_d = src_start[:, None] + a + shift - chunk_start
    pad_d = torch.full_like(real_d, -(local_rows + 1))
    idx_d = torch.stack((real_d, pad_d), dim=2).reshape(-1)
    seq = torch.arange(seqlens.numel()).repeat_interleave(2 * k)
    real = torch.tensor([True, False]).repeat(seqlens.numel() * k)
    keep = lens > 0
    return Segments(starts[keep], pos_d[keep], idx_d[keep], seq[keep], real[keep])


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
    rows concatenated in rank order. Returns (starts, D) for the non-empty real runs.
    """
    if cp == 1 or layout == "contiguous":
        # Concatenating the ranks in order gives the padded buffer itself (R-SHARD-1, -3).
        keep = seqlens > 0
        return cu[:-1][keep], (cu_padded[:-1] - cu[:-1])[keep]
    q = torch.arange(2 * cp)
    c = torch.div(seqlens_padded, 2 * cp, rounding_mode="floor")[:, None]  # [B, 1]
    rank = torch.where(q < cp, q, 2 * cp - 1 - q)  # chunk q lives on rank(q) (R-SHARD-2)
    second = (q >= cp).to(torch.int64)
    local = torch.div(cu_padded[:-1], cp, rounding_mode="floor")[:, None] + second * c
    n_real = torch.minimum((seqlens[:, None] - q * c).clamp_(min=0), c)
    out_start = cu[:-1, None] + q * c
    d = rank * local_rows + local - q * c - cu[:-1, None]
    keep = (n_real > 0).reshape(-1)
    return out_start.reshape(-1)[keep], d.reshape(-1)[keep]


def expand(
    rows: int,
    starts: torch.Tensor,
    d: torch.Tensor,
    *,
    slope: int,
    dtype: torch.dtype,
    device: torch.device,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-row values `slope * k + D_m` for row `k` in segment `m`, as a [rows] tensor.

    `starts` must be strictly increasing with `starts[0] == 0` (non-empty segments covering all
    rows). Costs one fill, one small host-to-device copy, one indexed write and one in-place
    cumulative sum on `device`; no device-to-host synchronisation.
    """
    prev = torch.cat((torch.tensor([slope], dtype=d.dtype), d[:-1]))
    vals = d - prev + slope
    buf = out if out is not None else torch.empty(rows, dtype=dtype, device=device)
    buf.fill_(slope)
    if rows == 0:
        return buf
    both = torch.stack((starts, vals.to(starts.dtype))).to(device=device, non_blocking=True)
    buf.index_put_((both[0],), both[1].to(dtype))
    return buf.cumsum_(0)


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
    seg = pack_segments(
        plan.seqlens.to(torch.int64),
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
    offset = expand(rows, seg.starts, seg.pos_d, slope=1, dtype=torch.int64, device=cpu)
    seq = expand(rows, seg.starts, seg.seq, slope=0, dtype=torch.int64, device=cpu)
    real = expand(
        rows, seg.starts, seg.real.to(torch.int64), slope=0, dtype=torch.int64, device=cpu
    )
    return seq, offset, real.bool()
