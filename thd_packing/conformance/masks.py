"""The mask form of a batch (R-IN-7): a padded `[B, S, *trail]` array and a bool mask `[B, S]`,
drawn to hit what a fast packer of this form gets wrong (test_mask_form.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .strategies import Batch

MASK_LAYOUTS = ("C", "F", "strided", "window", "ragged")
# How a mask row is drawn. A packer may scan the mask's bytes in 8-byte words and take a row
# whose True entries form one run as a slice: what it must get right is a run starting or ending
# at a word boundary or at column S - 1, a run with a one-token hole or a stray token after a
# gap (its span then exceeds its count, or a misplaced end matches it), empty and full rows.
MASK_ROW_KINDS = ("empty", "full", "left", "right", "run", "run+stray", "gap", "runs",
                  "scattered")


@dataclass(frozen=True)
class MaskedBatch:
    """A padded batch `[B, S, *trail]` and its bool mask `[B, S]`: row i is True exactly on the
    half-open column runs `runs[i]`; `layout` is the mask's (and the values') memory order: "C",
    "F" (column-major), "strided" (every other column of an array twice as wide), "window"
    (columns 8 .. S + 8 of an array 8 + ceil_to(S, 8) wide: rows whole words apart and a word
    in, whatever S) or "ragged" (the first S columns of an array S + 1 wide: rows an odd number
    of bytes apart)."""

    seq_len: int
    runs: tuple[tuple[tuple[int, int], ...], ...]
    trail: tuple[int, ...] = ()
    dtype: str = "int64"
    layout: str = "C"
    seed: int = 0

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(sum(stop - start for start, stop in row) for row in self.runs)

    @property
    def batch(self) -> Batch:
        """The list form of the same sequences (their values: `Batch.arrays`)."""
        return Batch(self.lengths, self.trail, self.dtype, self.seed)

    def _filled(self, shape: tuple[int, ...], dtype: Any, byte: int) -> np.ndarray:
        """An array of `shape` in this layout, every byte `byte`."""
        s = shape[1]
        if self.layout == "F":
            base = np.empty(shape[::-1], dtype=dtype)
        else:
            wide = {"strided": 2 * s, "window": 8 + -(-s // 8) * 8, "ragged": s + 1}
            base = np.empty((shape[0], wide.get(self.layout, s), *shape[2:]), dtype=dtype)
        base.view(np.uint8)[...] = byte
        if self.layout in ("C", "F"):
            return base if self.layout == "C" else base.T
        start, step = (8, 1) if self.layout == "window" else (0, 1 + (self.layout == "strided"))
        return base[:, start:start + step * s:step]

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(values, mask): the batch's sequences at the mask's True entries, bytes 0xA5 off it
        (never to be read)."""
        b, s = len(self.runs), self.seq_len
        mask = self._filled((b, s), bool, 0)
        values = self._filled((b, s, *self.trail), np.dtype(self.dtype), 0xA5)
        for i, (row, seq) in enumerate(zip(self.runs, self.batch.arrays(), strict=True)):
            cols = [c for start, stop in row for c in range(start, stop)]
            mask[i, cols] = True
            values[i, cols] = seq
        return values, mask


def as_runs(cols: Any) -> tuple[tuple[int, int], ...]:
    """Sorted distinct columns as maximal half-open runs."""
    out: list[list[int]] = []
    for c in sorted(set(cols)):
        if out and out[-1][1] == c:
            out[-1][1] = c + 1
        else:
            out.append([c, c + 1])
    return tuple((a, b) for a, b in out)


def _edges(s: int) -> list[int]:
    """Columns at and next to the 8-byte word boundaries of a row of `s` bool entries, and the
    row's ends."""
    near = {c + d for c in range(0, s + 1, 8) for d in (-1, 0, 1)} | {0, 1, s - 1, s}
    return sorted(c for c in near if 0 <= c <= s)


@st.composite
def mask_rows(draw: st.DrawFn, s: int, *, zero: bool = True) -> tuple[tuple[int, int], ...]:
    """One mask row of `s` columns as runs (MASK_ROW_KINDS); never empty without `zero`
    (then `s` >= 1)."""
    if s == 0:
        return ()
    col = st.one_of(st.sampled_from(_edges(s)), st.integers(0, s))
    kinds = MASK_ROW_KINDS if zero else MASK_ROW_KINDS[1:]
    kind = draw(st.sampled_from(kinds))
    a, c = sorted((draw(col), draw(col)))
    run = set(range(a, c))
    if kind == "full":
        cols = set(range(s))
    elif kind in ("left", "right"):
        n = draw(st.one_of(st.sampled_from(_edges(s)), st.integers(0, s)))
        cols = set(range(s - n, s)) if kind == "left" else set(range(n))
    elif kind == "run+stray":
        cols = run | {min(draw(col), s - 1)}
    elif kind == "gap":
        cols = run - {draw(st.integers(a, max(a, c - 1)))}
    elif kind == "runs":
        cols = run | set(range(*sorted((draw(col), draw(col)))))
    elif kind == "scattered":
        cols = {j for j, bit in enumerate(draw(st.lists(st.booleans(), min_size=s, max_size=s)))
                if bit}
    else:
        cols = run if kind == "run" else set()
    if not cols and not zero:
        cols = {s - 1}
    return as_runs(cols)


@st.composite
def masked_batches(draw: st.DrawFn, *, caps: frozenset[str] | None = None,
                   max_batch: int = 6, dtypes: tuple[str, ...] = ("int64", "float32", "uint8",
                                                                  "bool", "float64")
                   ) -> MaskedBatch:
    """Rows of S columns, S a multiple of 8 and not (0 to 48): empty rows (and S = 0) only
    where `caps` declares `zero_length`, trailing dims only with `trailing_dims` (or `caps`
    None). With `caps`, never only empty rows: that batch has its named test
    (`ALL_EMPTY_MASKS`)."""
    zero = caps is None or "zero_length" in caps
    s = draw(st.one_of(st.sampled_from([8, 16, 24, 32, 40]),
                       st.sampled_from([0, 1, 2, 7, 9, 12, 15, 17, 23, 31, 33] if zero else
                                       [1, 2, 7, 9, 12, 15, 17, 23, 31, 33]),
                       st.integers(0 if zero else 1, 48)))
    b = draw(st.integers(1, max_batch))
    trails: tuple[tuple[int, ...], ...] = ((), (3,), (2, 2), (0,))
    if caps is not None and "trailing_dims" not in caps:
        trails = ((),)
    runs = [draw(mask_rows(s, zero=zero)) for _ in range(b)]
    if caps is not None and not any(runs):
        s = max(s, 1)  # a real token: the batch of only empty rows has its named test
        runs[0] = ((s - 1, s),)
    return MaskedBatch(
        seq_len=s,
        runs=tuple(runs),
        trail=draw(st.sampled_from(trails)),
        dtype=draw(st.sampled_from(dtypes)),
        layout=draw(st.sampled_from(MASK_LAYOUTS)),
        seed=draw(st.integers(0, 2**16)),
    )
