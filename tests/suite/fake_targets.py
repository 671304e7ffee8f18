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


class ConventionBugsTarget(ReferenceTarget):
    """The reference with spec 1.1 bugs, one per convention: MXFP8 padded as tensor scaling
    (tp * cp * 16, the padding that trips TE's divisible-by-32 assertion), max_num_seqs ignored
    (K = B, and B > max_num_seqs accepted), seq_align='cp' packed as 'tp_cp', and the padding
    segment's position ids all 0 under tail='segment'."""

    name = "convention-bugs"
    description = "tests/suite: the reference with one bug per spec 1.1 convention"
    capabilities = CORE | {"bucket", "fp8", "fp8_recipes", "static_metadata", "tail_segment",
                           "seq_align_cp", "plan"}

    @staticmethod
    def _wrong(config: dict[str, Any]) -> dict[str, Any]:
        out = dict(config)
        if out.get("fp8") == "mxfp8":
            out["fp8"] = "tensor"
        if out.get("seq_align") == "cp":
            out["seq_align"] = "tp_cp"
        out.pop("max_num_seqs", None)
        return out

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        wrong = self._wrong(config)
        rows, pos, meta = super().pack(seqs, wrong, cp_rank, need_roll=need_roll,
                                       pad_value=pad_value)
        if config.get("tail") == "segment":
            plan = reference.plan_thd([int(n) for n in meta["seqlens"][:len(seqs)]],
                                      reference.PackConfig(**wrong))
            rmap = reference.row_map(plan, reference.PackConfig(**wrong), cp_rank)
            pos = pos.copy()
            pos[[k for k, src in enumerate(rmap) if src.seq >= len(seqs)]] = 0
        return rows, pos, meta

    def plan(self, seqlens: Any, config: dict[str, Any]) -> dict[str, Any]:
        from conformance.targets.protocol import plain_meta

        return plain_meta(reference.plan_thd(seqlens, reference.PackConfig(**self._wrong(config))))
