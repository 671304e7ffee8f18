"""The consumer contract (spec §12a): checks over a target's own outputs, any convention.

Pure functions over plain data: the batch (NumPy arrays), every rank's output (`rows`, `pos`,
`meta`) and the config's tp, cp, layout and FP8 recipe. They read the target's own metadata,
never the reference's plan, so no convention can hide a fault: the buffer is read and checked
by `buffer.py` (R-CONSUMER-1 to -5, -8, -9), and here every rank's rows are placed through TE's
partition of it and compared with the batch bit for bit (any dtype). `check_pack` runs every
check in the order a failure is best explained.
Each check raises `RuleViolation` naming the rule it disproves, with the first mismatch (rank,
row, sequence, offset), or `TargetError` when the output cannot be read at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from thd_packing import reference

from .buffer import (
    Buffer,
    check_buffer,
    check_fp8_split,
    check_integer_dtypes,
    check_max_seqlen,
    check_real_cu_seqlens,
    check_tp_split,
    violation,
)
from .under_test import TargetError

# ----------------------------------------------------------------------------------------------
# Rows: R-CONSUMER-6, -7, -10, -11, -12


def show(value: Any) -> str:
    return np.array2string(np.asarray(value), threshold=8)


def row_bytes(a: np.ndarray) -> np.ndarray:
    width = int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize
    return np.ascontiguousarray(a).view(np.uint8).reshape(a.shape[0], width)


class _Tokens:
    """The batch flattened: every token's row bytes and where it comes from."""

    def __init__(self, seqs: Sequence[np.ndarray], outputs: Sequence[Any]) -> None:
        self.lengths = [int(s.shape[0]) for s in seqs]
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        # No sequence (B' = 0: an omitting packer's all-empty batch): the rows' own type, which
        # check_pack holds to the batch's.
        like = seqs[0] if seqs else outputs[0].rows
        self.dtype, self.trail = like.dtype, like.shape[1:]
        self.bytes = row_bytes(np.concatenate([np.asarray(s) for s in seqs] or [like[:0]]))
        self.where: dict[bytes, list[tuple[int, int]]] = {}
        for i, length in enumerate(self.lengths):
            for j in range(length):
                self.where.setdefault(self.bytes[self.starts[i] + j].tobytes(), []).append((i, j))

    def unique_source(self, row: np.ndarray) -> tuple[int, int] | None:
        """(i, j) if these bytes are exactly one token of the batch, else None."""
        found = self.where.get(row.tobytes())
        return found[0] if found is not None and len(found) == 1 else None

    def length(self, seg: np.ndarray) -> np.ndarray:
        """L of each segment's sequence (0 past the batch)."""
        return np.asarray(self.lengths + [0], dtype=np.int64)[np.minimum(seg, len(self.lengths))]

    def index(self, seg: np.ndarray, off: np.ndarray) -> np.ndarray:
        """The flat batch's row of each (segment, offset), segments past the batch capped."""
        return self.starts[np.minimum(seg, len(self.lengths) - 1)] + off

    def holds(self, rows: np.ndarray, got: np.ndarray, k: int) -> str:
        """What row k holds: the token of the batch it is, else its values."""
        source = self.unique_source(got[k])
        return (f"token {source[1]} of sequence {source[0]}" if source is not None
                else show(rows[k]))


def _check_row_type(rows: np.ndarray, tokens: _Tokens, rank: int, rule: str) -> None:
    if rows.dtype != tokens.dtype or rows.shape[1:] != tokens.trail:
        raise violation(f"rank {rank}: rows {rows.dtype}{list(rows.shape)}, batch "
                         f"{tokens.dtype}[n, {', '.join(map(str, tokens.trail))}]", rule)


def _real(tokens: _Tokens, seg: np.ndarray, off: np.ndarray) -> np.ndarray:
    return off < tokens.length(seg)


def _segments_cover(tokens: _Tokens, buffer: Buffer) -> None:
    b, k = len(tokens.lengths), buffer.segments.size
    if k < b:
        raise violation(f"cu_seqlens_padded has {k} segments for {b} sequences: sequences "
                         f"{k}..{b - 1} (lengths {tokens.lengths[k:][:6]}) are dropped",
                         "R-CONSUMER-7")
    short = [i for i in range(b) if buffer.segments[i] < tokens.lengths[i]]
    if short:
        i = short[0]
        raise violation(f"segment {i} has {int(buffer.segments[i])} rows, sequence {i} has "
                         f"{tokens.lengths[i]} tokens", "R-CONSUMER-7")


def _locate(tokens: _Tokens, outputs: Sequence[Any], buffer: Buffer,
            i: int, j: int) -> tuple[int, int, int, int] | None:
    """Where token (i, j) sits on the ranks, if its value is unique: rank, row, segment, offset."""
    want = tokens.bytes[tokens.starts[i] + j]
    if tokens.unique_source(want) is None:
        return None
    for rank, output in enumerate(outputs):
        hits = np.flatnonzero(np.all(row_bytes(output.rows) == want, axis=1))
        if hits.size:
            k = int(hits[0])
            seg, off = buffer.slots[rank]
            return rank, k, int(seg[k]), int(off[k])
    return None


def _differing(got: np.ndarray, tokens: _Tokens, mask: np.ndarray,
               want_index: np.ndarray) -> np.ndarray:
    """Rows k with mask[k] whose bytes differ from token want_index[k] of the flat batch."""
    rows = np.flatnonzero(mask)
    if not rows.size:
        return rows
    same = np.all(got[rows] == tokens.bytes[want_index[rows]], axis=1)
    return rows[~same]


def check_tokens(seqs: Sequence[np.ndarray], outputs: Sequence[Any], buffer: Buffer) -> None:
    """R-CONSUMER-7: every real token at its consumer slot (i, j), bit for bit, so exactly once,
    in its own segment, in order; R-CONSUMER-6 where a token is found misplaced inside its own
    segment (the rows are not TE's partition of the target's buffer). need_roll=False."""
    tokens = _Tokens(seqs, outputs)
    _segments_cover(tokens, buffer)
    for rank, output in enumerate(outputs):
        _check_row_type(output.rows, tokens, rank, "R-CONSUMER-7")
    for rank, output in enumerate(outputs):
        seg, off = buffer.slots[rank]
        bad = _differing(row_bytes(output.rows), tokens, _real(tokens, seg, off),
                         tokens.index(seg, off))
        if not bad.size:
            continue
        k = int(bad[0])
        i, j = int(seg[k]), int(off[k])
        where = f"rank {rank} row {k} (sequence {i}, offset {j})"
        found = _locate(tokens, outputs, buffer, i, j)
        summary = f"{bad.size} real rows wrong on this rank"
        if found is None:
            raise violation(f"{where} does not hold token {j} of sequence {i}; the token is on "
                             f"no rank or its value is not unique ({summary})", "R-CONSUMER-7")
        r2, k2, s2, o2 = found
        if s2 == i:
            raise violation(f"{where}: the token is at rank {r2} row {k2}, which TE reads as "
                             f"offset {o2}: the rows are not TE's partition of the target's "
                             f"cu_seqlens_padded ({summary})", "R-CONSUMER-6")
        raise violation(f"{where}: the token is at rank {r2} row {k2}, in segment {s2} "
                         f"(offset {o2}), not its own ({summary})", "R-CONSUMER-7")


def check_positions(seqs: Sequence[np.ndarray], outputs: Sequence[Any], buffer: Buffer) -> None:
    """R-CONSUMER-10: without need_roll, a real slot (i, j) has position id j."""
    tokens = _Tokens(seqs, outputs)
    _segments_cover(tokens, buffer)
    for rank, output in enumerate(outputs):
        pos = getattr(output, "pos", None)
        if not isinstance(pos, np.ndarray):
            raise TargetError(f"rank {rank}: position ids are {type(pos).__name__}, not an array")
        if pos.shape != (buffer.local_rows,) or pos.dtype.kind not in "iu":
            raise violation(f"rank {rank}: position ids {pos.dtype}{list(pos.shape)}, expected "
                             f"integers [{buffer.local_rows}]", "R-CONSUMER-10")
        seg, off = buffer.slots[rank]
        bad = np.flatnonzero(_real(tokens, seg, off) & (pos.astype(np.int64) != off))
        if bad.size:
            k = int(bad[0])
            raise violation(f"rank {rank} row {k} (sequence {int(seg[k])}, offset "
                             f"{int(off[k])}): position id {int(pos[k])}, expected "
                             f"{int(off[k])} ({bad.size} wrong on this rank)", "R-CONSUMER-10")


def check_labels(seqs: Sequence[np.ndarray], outputs: Sequence[Any], buffer: Buffer) -> None:
    """R-CONSUMER-11: with need_roll, a real slot (i, j < L_i - 1) holds x_i[j + 1]."""
    tokens = _Tokens(seqs, outputs)
    _segments_cover(tokens, buffer)
    for rank, output in enumerate(outputs):
        _check_row_type(output.rows, tokens, rank, "R-CONSUMER-11")
        seg, off = buffer.slots[rank]
        got = row_bytes(output.rows)
        bad = _differing(got, tokens, off < tokens.length(seg) - 1, tokens.index(seg, off) + 1)
        if bad.size:
            k = int(bad[0])
            i, j = int(seg[k]), int(off[k])
            holds = tokens.holds(output.rows, got, k)
            raise violation(f"rank {rank} row {k} (sequence {i}, offset {j}): label is {holds}, "
                             f"expected token {j + 1} of sequence {i} ({bad.size} wrong on "
                             "this rank)", "R-CONSUMER-11")


def check_ignored_labels(seqs: Sequence[np.ndarray], outputs: Sequence[Any], buffer: Buffer,
                         ignore_index: Any = -100) -> None:
    """R-CONSUMER-15: with need_roll under labels='ignore', every padding row and the slot
    (i, L_i - 1) of every non-empty sequence hold ignore_index (R-LABEL-1)."""
    tokens = _Tokens(seqs, outputs)
    _segments_cover(tokens, buffer)
    ignore = row_bytes(np.full((1, *tokens.trail), ignore_index, dtype=tokens.dtype))[0]
    for rank, output in enumerate(outputs):
        _check_row_type(output.rows, tokens, rank, "R-CONSUMER-15")
        seg, off = buffer.slots[rank]
        free = ~(off < tokens.length(seg) - 1)
        got = row_bytes(output.rows)
        bad = np.flatnonzero(free & ~np.all(got == ignore, axis=1))
        if bad.size:
            k = int(bad[0])
            i, j = int(seg[k]), int(off[k])
            what = "padding" if not _real(tokens, seg, off)[k] else "its last real token"
            holds = tokens.holds(output.rows, got, k)
            raise violation(f"labels='ignore': rank {rank} row {k} (segment {i}, offset {j}, "
                             f"{what}) holds {holds}, not ignore_index {ignore_index} "
                             f"({bad.size} such rows on this rank)", "R-CONSUMER-15")


def check_position_boundaries(seqs: Sequence[np.ndarray], outputs: Sequence[Any],
                              buffer: Buffer) -> None:
    """R-PID-2: the segments a consumer derives from the position ids alone (R-PID-1, over the
    buffer order: every rank's rows at their consumer slots) start at every non-empty
    sequence's first token and nowhere else inside its real tokens; position ids that are the
    inputs' (without need_roll, or with it under labels='ignore')."""
    tokens = _Tokens(seqs, outputs)
    _segments_cover(tokens, buffer)
    bounds = buffer.bounds
    ids = np.zeros(int(bounds[-1]), dtype=np.int64)
    for rank, output in enumerate(outputs):
        pos = getattr(output, "pos", None)
        if not isinstance(pos, np.ndarray) or pos.shape != (buffer.local_rows,) \
                or pos.dtype.kind not in "iu":
            raise TargetError(f"rank {rank}: position ids are {type(pos).__name__}"
                              f"{list(getattr(pos, 'shape', []))}, not integers "
                              f"[{buffer.local_rows}]")
        seg, off = buffer.slots[rank]
        ids[bounds[seg] + off] = pos.astype(np.int64)
    starts = np.zeros(ids.size + 1, dtype=bool)
    starts[reference.segments_from_position_ids(ids)] = True
    for i, length in enumerate(tokens.lengths):
        first = int(bounds[i])
        if length and not starts[first]:
            raise violation(f"sequence {i} (length {length}) starts at buffer row {first}, "
                             f"but its position id {int(ids[first])} follows the row before "
                             f"(id {int(ids[first - 1])}): position ids glue that row to it",
                             "R-PID-2")
        inner = np.flatnonzero(starts[first + 1:first + length])
        if inner.size:
            row = first + 1 + int(inner[0])
            raise violation(f"sequence {i} (length {length}): position ids start a new segment "
                             f"inside it at buffer row {row} (ids {ids[row - 1]}, {ids[row]})",
                             "R-PID-2")


def _is_pad(row: np.ndarray, pad: np.ndarray | None) -> bool:
    if pad is None:
        return False
    if row.dtype.kind in "fc":
        return bool(np.array_equal(row, pad, equal_nan=True))
    return bool(np.array_equal(row, pad))


def check_no_leak(seqs: Sequence[np.ndarray], outputs: Sequence[Any], buffer: Buffer, *,
                  need_roll: bool, pad_value: Any = 0, labels: str = "roll",
                  ignore_index: Any = -100) -> None:
    """R-CONSUMER-12: no padding row holds a token of another sequence (a leak). Decided for
    tokens whose value is unique in the batch; a row equal to the value padding holds is never
    a leak: pad_value, or ignore_index for labels under labels='ignore' (R-CONSUMER-15)."""
    tokens = _Tokens(seqs, outputs)
    if need_roll and labels == "ignore":
        pad_value = ignore_index
    try:
        pad: np.ndarray | None = np.full(tokens.trail, pad_value, dtype=tokens.dtype)
    except (TypeError, ValueError, OverflowError):
        pad = None
    severity = "medium (labels, need_roll)" if need_roll else "low (inputs)"
    for rank, output in enumerate(outputs):
        rows = output.rows
        if rows.dtype != tokens.dtype or rows.shape[1:] != tokens.trail:
            continue  # R-CONSUMER-7 / -11 report the wrong dtype; no value can be compared
        seg, off = buffer.slots[rank]
        got = row_bytes(rows)
        for k in np.flatnonzero(~_real(tokens, seg, off)):
            source = tokens.unique_source(got[k])
            if source is None or source[0] == int(seg[k]) or _is_pad(rows[k], pad):
                continue
            raise violation(f"leak (severity: {severity}): rank {rank} row {k} is padding of "
                             f"segment {int(seg[k])} (offset {int(off[k])}) and holds token "
                             f"{source[1]} of sequence {source[0]}", "R-CONSUMER-12")


# ----------------------------------------------------------------------------------------------
# Unpack: R-CONSUMER-13


def check_unpack(seqs: Sequence[np.ndarray], unpacked: Any) -> None:
    """R-CONSUMER-13: the target's unpack of its own pack is the batch, bit for bit."""
    if not isinstance(unpacked, list | tuple):
        raise TargetError(f"unpack returned {type(unpacked).__name__}, not a list of arrays")
    if len(unpacked) != len(seqs):
        raise violation(f"unpack returned {len(unpacked)} sequences for {len(seqs)}",
                         "R-CONSUMER-13")
    for i, (got, want) in enumerate(zip(unpacked, seqs, strict=True)):
        got = np.asarray(got)
        if got.dtype != want.dtype or got.shape != want.shape:
            raise violation(f"sequence {i}: unpack gave {got.dtype}{list(got.shape)}, input "
                             f"{want.dtype}{list(want.shape)}", "R-CONSUMER-13")
        if want.shape[0] == 0:
            continue
        bad = np.flatnonzero(np.any(row_bytes(got) != row_bytes(want), axis=1))
        if bad.size:
            j = int(bad[0])
            raise violation(f"sequence {i} row {j}: unpack gave {show(got[j])}, input "
                             f"{show(want[j])}", "R-CONSUMER-13")


# ----------------------------------------------------------------------------------------------


def segment_batch(seqs: Sequence[Any], zero_length: str = "keep") -> list[Any]:
    """The sequences the segments stand for: the batch, or under a declared zero-length-omitted
    convention its non-empty sequences in order (R-META-8, R-CONSUMER-14): none for a batch of
    only empty ones, whose pack then needs no segment (K >= B' = 0)."""
    if zero_length != "omit":
        return list(seqs)
    return [s for s in seqs if len(s)]


def segment_lengths(lengths: Sequence[int], zero_length: str = "keep") -> list[int]:
    """`segment_batch` on lengths alone (a `range` stands for each sequence: no data)."""
    return [len(r) for r in segment_batch([range(int(n)) for n in lengths], zero_length)]


def check_pack(seqs: Sequence[np.ndarray], outputs: Sequence[Any], config: Mapping[str, Any],
               *, need_roll: bool = False, pad_value: Any = 0,
               zero_length: str = "keep") -> None:
    """Every pack rule of the contract, in the order a failure is best explained: the buffer,
    the split, the real boundaries, then the rows. The declared label convention (config
    `labels`, `ignore_index`) and zero-length convention (`zero_length`) are read."""
    labels = str(config.get("labels", "roll"))
    ignore_index = config.get("ignore_index", -100)
    # A packer that gives no position ids (Packed.position_ids None) has none to judge.
    has_pos = all(getattr(output, "pos", None) is not None for output in outputs)
    segs = segment_batch(seqs, zero_length)  # R-CONSUMER-14
    buffer = check_buffer(outputs, config)
    check_integer_dtypes(outputs)
    if not segs and seqs:  # no segment owed (B' = 0): the rows still have the batch's type
        batch = _Tokens(seqs, outputs)
        for rank, output in enumerate(outputs):
            _check_row_type(output.rows, batch, rank, "R-CONSUMER-7")
    check_tp_split(outputs, config)
    check_fp8_split(outputs, config)
    check_real_cu_seqlens([int(s.shape[0]) for s in segs], outputs, buffer.bounds)
    check_max_seqlen(outputs, buffer.bounds)
    if need_roll:
        check_labels(segs, outputs, buffer)
        if labels == "ignore":
            check_ignored_labels(segs, outputs, buffer, ignore_index)
    else:
        check_tokens(segs, outputs, buffer)
        if has_pos:
            check_positions(segs, outputs, buffer)
    if has_pos and (not need_roll or labels == "ignore"):
        check_position_boundaries(segs, outputs, buffer)
    check_no_leak(segs, outputs, buffer, need_roll=need_roll, pad_value=pad_value,
                  labels=labels, ignore_index=ignore_index)
