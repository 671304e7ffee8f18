"""Small conformance targets that exercise the suite's own machinery (tests/suite/).

Each wraps the literal reference, so every check it is given passes unless the wrapper
changes something on purpose.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import reference
from conformance.protocol import VALIDATION, Declared, Packed, plain_meta
from conformance.targets.reference import ReferenceTarget

# Labels and pad values; the validation tests (R-ERR-*) are not these targets' subject.
CORE = frozenset({"need_roll", "pad_value"})
ELSEWHERE = frozenset(VALIDATION)


class DecliningTarget(ReferenceTarget):
    """The reference with bucket, fp8 and min_local_rows declined: the adapter raises
    NotImplementedError for them, as a real adapter for a packer without them would."""

    name = "declining"
    description = "tests/suite: the reference, declining bucket, fp8 and min_local_rows"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        for feature in ("bucket", "fp8", "min_local_rows"):
            if config.get(feature) not in (None, False):
                raise NotImplementedError(f"{feature} is not supported")
        return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)


class TrailingSegmentTarget(ReferenceTarget):
    """The reference's rows, but the metadata of another convention: the total-level padding
    as its own trailing segment (B + 1 entries in seqlens_padded and cu_seqlens_padded)."""

    name = "trailing-segment"
    description = "tests/suite: the reference reporting B + 1 padded segments"
    declared = Declared(features=CORE | {"bucket", "fp8", "min_local_rows"},
                        validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        meta = dict(got.meta)
        align = reference.PackConfig(**config).sequence_align
        own = [-(-int(n) // align) * align for n in meta["seqlens"]]
        padded = np.asarray([*own, meta["total"] - sum(own)], dtype=np.int32)
        meta["seqlens_padded"] = padded
        meta["cu_seqlens_padded"] = np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
        return Packed(got.rows, got.position_ids, meta)


class CrashingTarget(ReferenceTarget):
    """A target whose pack crashes on every call (a bug outside its own validation)."""

    name = "crashing"
    description = "tests/suite: pack raises ZeroDivisionError"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        return {"rows": 1 // 0}  # type: ignore[return-value]


class ConventionBugsTarget(ReferenceTarget):
    """The reference with spec 1.1 bugs, one per convention: MXFP8 padded as tensor scaling
    (tp * cp * 16, the padding that trips TE's divisible-by-32 assertion), max_num_seqs ignored
    (K = B, and B > max_num_seqs accepted), seq_align='cp' packed as 'tp_cp', and the padding
    segment's position ids all 0 under tail='segment'."""

    name = "convention-bugs"
    description = "tests/suite: the reference with one bug per spec 1.1 convention"
    declared = Declared(features=CORE | {"bucket", "fp8", "fp8_recipes", "static_metadata",
                                         "tail_segment", "seq_align_cp"},
                        validated_elsewhere=ELSEWHERE)

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
             pad_value: Any = 0) -> Packed:
        wrong = self._wrong(config)
        got = super().pack(seqs, wrong, cp_rank, need_roll=need_roll, pad_value=pad_value)
        rows, pos, meta = got.rows, got.position_ids, got.meta
        if config.get("tail") == "segment":
            plan = reference.plan_thd([int(n) for n in meta["seqlens"][:len(seqs)]],
                                      reference.PackConfig(**wrong))
            rmap = reference.row_map(plan, reference.PackConfig(**wrong), cp_rank)
            pos = pos.copy()
            pos[[k for k, src in enumerate(rmap) if src.seq >= len(seqs)]] = 0
        return Packed(rows, pos, meta)

    def plan(self, seqlens: Any, config: dict[str, Any]) -> dict[str, Any]:
        return plain_meta(reference.plan_thd(seqlens, reference.PackConfig(**self._wrong(config))))


class LenientRollTarget(ReferenceTarget):
    """The reference behind a flag of its own: any truthy need_roll builds labels, and the
    type check of need_roll is declared as its callers' (validated_elsewhere)."""

    name = "lenient-roll"
    description = "tests/suite: the reference, need_roll's type left to its callers"
    declared = Declared(features=CORE, validated_elsewhere=frozenset({"need_roll_type"}))

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        return super().pack(seqs, config, cp_rank, need_roll=bool(need_roll),
                            pad_value=pad_value)
