# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""Row maps as chunk tables, and their expansion into per-row indices (spec §5, §7, §8, §9).

A rank's local rows are a concatenation of *chunks*, one or two per sequence: runs of rows whose
offsets are consecutive within one padded sequence (its real rows, then its padding rows). The
chunk table has O(B) entries and is built on the host with a constant number of CPU tensor ops.
A per-row quantity that is piecewise linear in the row `k` (a ramp `k + D_m` or a step `D_m` on
chunk `m`) is expanded on the target device from its second difference, which is zero except at
O(B) rows (`second_sums`): a zero buffer, one accumulating indexed write, two cumulative sums.
The position ids and the gather index share one such buffer (`positions_and_sources`).

Every pass over the rows is a 1-D scan (`repeat_interleave` of one count, `cumsum`), which torch
runs on one thread on the CPU; element-wise fills fork torch's intra-op thread pool past its
grain size and stall when other processes hold the cores.
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
    rows concatenated in rank order. Returns (starts, D); runs may be empty (`expand`).
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


def zeros(
    n: int, dtype: torch.dtype, device: torch.device, out: torch.Tensor | None = None
) -> torch.Tensor:
    """A `[n]` zero tensor, written on one thread on the CPU: fresh, or the first `n` elements
    of `out` (a contiguous buffer of `dtype` that the caller no longer needs).

    `torch.zeros` forks the intra-op thread pool for large `n` (see the module docstring).
    For index dtypes, `repeat_interleave` of one count writes segment 0's index `n` times in one
    plain loop (its one segment is never split across threads; `output_size` spares CUDA a
    sync); other dtypes, and a reused buffer, take a 1-D `cumsum` of a broadcast zero, a slower
    scan.
    """
    if out is None and dtype in (torch.int32, torch.int64):
        count = torch.tensor([n], dtype=dtype)
        if device.type != "cpu":
            count = count.to(device=device, non_blocking=True)
        return torch.repeat_interleave(count, output_size=n)
    zero = torch.zeros(1, dtype=dtype, device=device).expand(n)
    if out is None:
        return torch.cumsum(zero, 0, dtype=dtype)
    return torch.cumsum(zero, 0, dtype=dtype, out=out[:n])


def second_sums(
    rows: int,
    at: torch.Tensor,
    z: torch.Tensor,
    dtype: torch.dtype,
    device: torch.device,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """`[rows]` values whose second difference is `z[e]` summed at rows `at[e]`, zero elsewhere
    (CPU int64 `at`, each `<= rows + 1`, and `z`): a piecewise-linear function of the row.

    A piece that starts at row `s` and changes the function by `g(k) = a * k + b` from there on
    contributes `g(s)` at `s` and `a - g(s)` at `s + 1`; pieces may be empty (their terms add up
    at the same rows: an accumulating write, deterministic on every device). Costs one small
    host-to-device copy, one zero buffer (`zeros`), one indexed write of `len(at)` entries and
    two in-place cumulative sums: no element-wise pass and no device-to-host synchronisation.
    Partial sums wrap like the integers they are; the final values are exact when they and the
    first differences fit `dtype` (`index_dtype`). Two spare elements take the ends of empty
    pieces.
    """
    if device.type != "cpu":
        table = torch.stack((at, z)).to(device=device, non_blocking=True)
        at, z = table[0], table[1]
    buf = zeros(rows + 2, dtype, device, out)
    buf.index_put_((at,), z.to(dtype), accumulate=True)
    return buf.cumsum_(0).cumsum_(0)[:rows]


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
    """The per-row values `slope * k + d[m]` for row `k` in segment `m`, as a [rows] tensor of
    `dtype` on `device` (a ramp for slope 1, a step for slope 0).

    `starts` (CPU int64, like `d`) must be non-decreasing from `starts[0] == 0`, each `<= rows`;
    empty segments are allowed. Segment `m` changes the function by the constant
    `d[m] - d[m-1]` from its start on, and `slope * k` starts at row 0 (`second_sums`).
    """
    steps = d - F.pad(d, (1, -1))
    origin = torch.tensor([0, 1])  # g(k) = slope * k from row 0: 0 at row 0, slope at row 1
    at = torch.cat((origin, starts, starts + 1))
    z = torch.cat((origin * slope, steps, -steps))
    return second_sums(rows, at, z, dtype, device, out)


def index_dtype(*bounds: int) -> torch.dtype:
    """int32 when every value and increment of an index fits in it, else int64."""
    return torch.int32 if sum(abs(b) for b in bounds) + 2 <= INT32_MAX else torch.int64


def positions_and_sources(
    ch: Chunks, n_src: int, rows: int, device: torch.device, *, index: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rank's position ids (int64, R-POS-2, R-ROLL-1) and gather index (int64, R-ROW-1) from one
    buffer: `(ids, buffer)`, the index in `buffer[:rows]` and two spare elements after it (the
    caller may reuse the whole buffer once the gather has read the index); the buffer is None
    when a padding run is longer than the source, or without `index`.

    Both are ramps of slope 1 on every piece of every chunk: the ids `row + d[0, m]`, the index
    `row + d[1, m]` on the real rows and, on the padding rows (overwritten with `pad_value`
    afterwards), the same ramp moved back where it would run past the buffer's last row, so
    that it never leaves the buffer and needs no clamp. Their first differences then differ by
    O(B) spikes, at the pieces' starts: one zero buffer, one indexed write and one scan give the
    ids' first difference, a scan into a fresh buffer the ids; a second indexed write turns the
    buffer into the index's first difference and a scan in place gives the index. A padding run
    longer than the source (a bucket far above a tiny batch) cannot be moved inside it.
    """
    pos_d, src_d = ch.d[0], ch.d[1]
    pad_start = ch.starts + ch.real
    fits = index and bool(ch.pad.max() <= n_src)
    steps = pos_d - F.pad(pos_d, (1, -1))
    at = [torch.tensor([1]), ch.starts, ch.starts + 1]  # the ids: slope 1 from row 1 (row 0: 0)
    z = [torch.tensor([1]), steps, -steps]
    if fits:
        real = src_d - pos_d  # index - ids on each chunk's real piece
        natural = pad_start + src_d  # where the padding piece's ramp would start
        pad = real + torch.minimum(natural, n_src - ch.pad) - natural  # ... on its padding piece
        at += [ch.starts, pad_start]
        z += [real - F.pad(pad, (1, -1)), pad - real]
    table = torch.stack((torch.cat(at), torch.cat(z)))
    if device.type != "cpu":
        table = table.to(device=device, non_blocking=True)
    n_pos = 1 + 2 * ch.starts.numel()
    buf = zeros(rows + 2, torch.int64, device)
    buf.index_put_((table[0, :n_pos],), table[1, :n_pos], accumulate=True)
    buf.cumsum_(0)
    if not fits:
        return buf.cumsum_(0)[:rows], None
    pos = torch.cumsum(buf, 0)[:rows]
    buf.index_put_((table[0, n_pos:],), table[1, n_pos:], accumulate=True)
    return pos, buf.cumsum_(0)


def plan_chunks(plan: Any, config: Any, rank: int, shift: int) -> Chunks:
    """`chunk_table` of rank `rank` read from the plan alone (no batch): the row map of
    `row_sources` (shift 0) and the rolled map of `labels.loss_mask` (shift 1)."""
    return chunk_table(
        plan.seqlens.to(torch.int64),
        plan.seqlens_padded.to(torch.int64),
        plan.cu_seqlens_padded.to(torch.int64),
        plan.cu_seqlens[:-1].to(torch.int64),
        config.cp_size,
        config.cp_layout,
        rank,
        plan.local_rows,
        shift,
    )


def row_sources(
    plan: Any, config: Any, cp_rank: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank `cp_rank`'s row map as CPU tensors `(seq, offset, real)`, each `[local_rows]`.

    The same map `pack_thd` gathers through (R-SHARD-1..3, R-ALIGN-4), exposed so that it can
    be compared with the reference's `row_map` without any data.
    """
    lengths = plan.seqlens.to(torch.int64)
    ch = plan_chunks(plan, config, cp_rank, 0)
    cpu = torch.device("cpu")
    rows = plan.local_rows
    k = ch.starts.numel() // lengths.numel()  # chunks per sequence
    chunk_seq = torch.arange(lengths.numel()).repeat_interleave(k)
    offset = expand(rows, ch.starts, ch.d[0], slope=1, dtype=torch.int64, device=cpu)
    seq = expand(rows, ch.starts, chunk_seq, slope=0, dtype=torch.int64, device=cpu)
    return seq, offset, offset < lengths[seq]
