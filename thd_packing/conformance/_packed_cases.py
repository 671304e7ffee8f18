"""Cases of verl's mask entry points (R-MEG-8, R-MEG-9): a padded batch and a bool mask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from thd_packing import reference

from .strategies import with_a_token


@dataclass(frozen=True)
class MaskCase:
    """`lengths[i]` True entries in row i of a `[B, S]` mask, laid out by `pattern`."""

    tp: int
    cp: int
    fp8: bool
    seq_len: int
    lengths: tuple[int, ...]
    pattern: str  # "left", "right" or "scattered"
    trail: tuple[int, ...] = ()
    dtype: str = "int64"
    seed: int = 0

    @property
    def config(self) -> dict[str, Any]:
        return {"tp_size": self.tp, "cp_size": self.cp, "fp8": self.fp8}

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(values [B, S, *trail], mask [B, S]); values are distinct and non-zero."""
        rng = np.random.default_rng(self.seed)
        b, s = len(self.lengths), self.seq_len
        mask = np.zeros((b, s), dtype=bool)
        for i, n in enumerate(self.lengths):
            if self.pattern == "left":
                mask[i, s - n:] = n > 0
            elif self.pattern == "right":
                mask[i, :n] = True
            else:
                mask[i, rng.choice(s, size=n, replace=False)] = True
        size = b * s * int(np.prod(self.trail, dtype=np.int64))
        values = (np.arange(size) + 1).reshape(b, s, *self.trail).astype(self.dtype)
        return values, mask

    def sequences(self) -> list[np.ndarray]:
        values, mask = self.arrays()
        return [values[i][mask[i]] for i in range(len(self.lengths))]

    def ref_config(self) -> reference.PackConfig:
        return reference.PackConfig(tp_size=self.tp, cp_size=self.cp, fp8=self.fp8)


@st.composite
def mask_cases(draw: st.DrawFn, *, caps: frozenset[str], max_batch: int = 6,
               max_seq: int = 24) -> MaskCase:
    """Drawn within the target's declared features (tp, fp8, trailing dims, empty rows), never
    a mask without a True entry (its named cases: `ALL_EMPTY_CASES`)."""
    s = draw(st.integers(1, max_seq))
    low = 0 if "zero_length" in caps else 1
    lengths = with_a_token(draw(st.lists(st.integers(low, s), min_size=1, max_size=max_batch)))
    return MaskCase(
        tp=draw(st.integers(1, 3)) if "tensor_parallel" in caps else 1,
        cp=draw(st.sampled_from((1, 2, 3, 4))) if "zigzag" in caps else 1,
        fp8=draw(st.booleans()) if "fp8" in caps else False,
        seq_len=s, lengths=lengths,
        pattern=draw(st.sampled_from(("left", "right", "scattered"))),
        trail=draw(st.sampled_from(((), (3,), (2, 2)))) if "trailing_dims" in caps else (),
        dtype=draw(st.sampled_from(("int64", "float32"))),
        seed=draw(st.integers(0, 2**16)),
    )


# Masks without a True entry (valid where the target keeps zero-length sequences, R-IN-2).
ALL_EMPTY_CASES = {
    "all-empty": MaskCase(1, 2, False, 6, (0, 0), "left"),
    "all-empty-tp-fp8": MaskCase(2, 3, True, 9, (0,), "right", trail=(2,), dtype="float32"),
}
