# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 1.0.1
"""Row maps as segment tables, and their expansion into per-row indices (spec §5, §7, §8, §9).

A rank's local rows are a concatenation of *segments*: runs of rows whose source offsets are
consecutive within one sequence and which are either all real or all padding. The segment table
has O(B * chunks) entries and is built on the host with a constant number of CPU tensor ops. A
per-row quantity that is `k + D_m` on segment `m` (a ramp; `k` is the row) or `D_m` (a step) is
expanded on the target device with three ops and one buffer: fill with the slope, add
`D_m - D_{m-1}` at each segment start (accumulating, so empty segments need no filtering on the
host), cumulative sum in place.
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
    """Host segment table of one rank (CPU int64, [2 * B * K]): per chunk a real run, then a
    padding run, in local row order. Runs may be empty; `expand` accepts that."""

    def __init__(
        self,
        lens: torch.Tensor,
        starts: torch.Tensor,
        pos_d: torch.Tensor,
        idx_d: torch.Tensor,
        chunks: int,
        real: torch.Tensor,
    ) -> None:
        self.lens = lens  # rows in the run
        self.starts = starts  # first local row of the run
        self.pos_d = pos_d  # position id = row + pos_d (a ramp)
        self.idx_d = idx_d  # source index = row + idx_d; negative on padding runs
        self.chunks = chunks  # K, chunks per sequence on this rank
        self.real = real  # [B, K] real rows per chunk


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
    pad_d: int | None = None,
) -> Segments:
    """Segment table of rank `rank`'s rows (R-SHARD-1..3, R-ROW-1..2, R-POS-2, R-ROLL-1..3).

    All inputs are CPU int64. `src_start[i]` is where sequence `i` starts in the flat values
    buffer. With `shift = 1` (`need_roll`) a row at offset `j` takes the value at `j + 1` and the
    position id `j + 1`; the row is real only if `j + 1 < L_i`, so a sequence's last real row
    is written as padding (R-ROLL-2 leaves it unspecified; we choose `pad_value`). Padding rows
    get the index `row + pad_d`: by default `-(local_rows + 1)`, negative on every row.
    """
    if pad_d is None:
        pad_d = -(local_rows + 1)
    a, n, k = _chunks(seqlens_padded, cu_padded, cp, layout, rank, local_rows)
    lim = (seqlens - shift).clamp_(min=0)[:, None]  # real iff offset < lim
    n_real = torch.minimum((lim - a).clamp_(min=0), n)
    # runs per chunk: [real, pad] -> shape [B, K, 2], flattened in local row order
    lens = torch.stack((n_real, n - n_real), dim=2).reshape(-1)
    starts = _exclusive_cumsum(lens)
    base = a + shift - starts.view(-1, k, 2)[:, :, 0]  # offset (+ shift) - local row
    pos_d = base[:, :, None].expand(-1, -1, 2).reshape(-1)
    real_d = src_start[:, None] + base
    idx_d = torch.stack((real_d, torch.full_like(real_d, pad_d)), dim=2).reshape(-1)
    return Segments(lens, starts, pos_d, idx_d, k, n_real)


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
    steps = torch.diff(d, dim=1, prepend=torch.full((d.shape[0], 1), slope, dtype=d.dtype))
    table = torch.cat((starts[None], steps)).to(device=device, non_blocking=True)
    index = (table[0],)
    out = []
    for j, dtype in enumerate(dtypes):
        buf = torch.full((rows + 1,), slope, dtype=dtype, device=device)
        buf.index_put_(index, table[j + 1].to(dtype), accumulate=True)
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
    b = plan.seqlens.numel()
    run_seq = torch.arange(b).repeat_interleave(2 * seg.chunks)
    run_real = torch.tensor([1, 0]).repeat(b * seg.chunks)
    offset = expand(rows, seg.starts, seg.pos_d, slope=1, dtype=torch.int64, device=cpu)
    seq = expand(rows, seg.starts, run_seq, slope=0, dtype=torch.int64, device=cpu)
    real = expand(rows, seg.starts, run_real, slope=0, dtype=torch.int64, device=cpu)
    return seq, offset, real.bool()
