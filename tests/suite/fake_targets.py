"""Small conformance targets that exercise the suite's own machinery (tests/suite/).

Each wraps the literal reference, so every check it is given passes unless the wrapper
changes something on purpose.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import reference
from conformance.targets.reference import ReferenceTarget

CORE = frozenset({"need_roll", "pad_value", "contiguous", "zero_length", "trailing_dims",
                  "unpack"})


class DecliningTarget(ReferenceTarget):
    """The reference with bucket, fp8 and min_local_rows declined: the adapter raises
    NotImplementedError for them, as a real adapter for a packer without them would."""

    name = "declining"
    description = "tests/suite: the reference, declining bucket, fp8 and min_local_rows"
    capabilities = CORE

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        for feature in ("bucket", "fp8", "min_local_rows"):
            if config.get(feature) not in (None, False):
                raise NotImplementedError(f"{feature} is not supported")
        return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)


class TrailingSegmentTarget(ReferenceTarget):
    """The reference's rows, but the metadata of another convention: the total-level padding
    as its own trailing segment (B + 1 entries in seqlens_padded and cu_seqlens_padded)."""

    name = "trailing-segment"
    description = "tests/suite: the reference reporting B + 1 padded segments"
    capabilities = CORE | {"bucket", "fp8", "min_local_rows"}

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        rows, pos, meta = super().pack(seqs, config, cp_rank, need_roll=need_roll,
                                       pad_value=pad_value)
        align = reference.PackConfig(**config).sequence_align
        own = [-(-int(n) // align) * align for n in meta["seqlens"]]
        padded = np.asarray([*own, meta["total"] - sum(own)], dtype=np.int32)
        meta["seqlens_padded"] = padded
        meta["cu_seqlens_padded"] = np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
        return rows, pos, meta


class CrashingTarget(ReferenceTarget):
    """A target whose pack crashes on every call (a bug outside its own validation)."""

    name = "crashing"
    description = "tests/suite: pack raises ZeroDivisionError"
    capabilities = CORE

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        return {"rows": 1 // 0}  # type: ignore[return-value]
