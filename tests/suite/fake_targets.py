"""Small conformance targets that exercise the suite's own machinery (tests/suite/).

Each wraps the literal reference, so every check it is given passes unless the wrapper
changes something on purpose.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from thd_packing import reference
from thd_packing.conformance.protocol import VALIDATION, Declared, Packed, plain_meta
from thd_packing.conformance.targets.reference import ReferenceTarget, plan_from_meta

# Labels and pad values; the validation tests (R-ERR-*) are not these targets' subject.
CORE = frozenset({"need_roll", "pad_value"})
ELSEWHERE = frozenset(VALIDATION)


def _sources(meta: Any, config: dict[str, Any], cp_rank: int) -> list[Any]:
    """The row map of the plan a pack's `meta` describes."""
    return reference.row_map(plan_from_meta(meta), reference.PackConfig(**config), cp_rank)


def _segment_ids_zeroed(packed: Packed, config: dict[str, Any], cp_rank: int,
                        num_seqs: int) -> np.ndarray:
    """The pack's position ids with every row of a padding segment (segment >= B) at 0."""
    pos = np.asarray(packed.position_ids).copy()
    pos[[k for k, src in enumerate(_sources(packed.meta, config, cp_rank))
         if src.seq >= num_seqs]] = 0
    return pos


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
        pos = got.position_ids
        if config.get("tail") == "segment" and pos is not None:
            pos = _segment_ids_zeroed(got, wrong, cp_rank, len(seqs))
        return Packed(got.rows, pos, got.meta)

    def plan(self, seqlens: Any, config: dict[str, Any]) -> dict[str, Any]:
        return plain_meta(reference.plan_thd(seqlens, reference.PackConfig(**self._wrong(config))))


class EmptyBatchBugsTarget(ReferenceTarget):
    """Two bugs seen in a real packer: trailing zero-length sequences are stripped before
    packing (K < B: R-CONSUMER-7), and the strip runs off the front of an all-empty batch
    (IndexError, a crash)."""

    name = "empty-batch-bugs"
    description = "tests/suite: drops trailing empty sequences, crashes on an all-empty batch"
    declared = Declared(features=CORE | {"bucket", "fp8", "min_local_rows"},
                        validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        kept = list(seqs)
        while kept[-1].shape[0] == 0:  # IndexError once every sequence is gone
            kept.pop()
        return super().pack(kept, config, cp_rank, need_roll=need_roll, pad_value=pad_value)


class PacksNothingForAllEmptyTarget(ReferenceTarget):
    """The reference, keeping zero-length sequences, but packing a batch of only empty ones as
    nothing (no row, no segment), as torchtune's PackedDataset makes no pack from no tokens."""

    name = "packs-nothing-for-all-empty"
    description = "tests/suite: the reference, no pack at all for a batch without a token"
    declared = Declared(features=CORE | {"bucket", "fp8", "min_local_rows"},
                        validated_elsewhere=ELSEWHERE)
    unpack = distributed_unpack = None

    @staticmethod
    def _nothing(packed: Packed) -> Packed:
        return Packed(packed.rows[:0], packed.position_ids[:0], {
            "cu_seqlens_padded": np.zeros(1, np.int32), "seqlens_padded": np.zeros(0, np.int32),
            "total": 0, "local_rows": 0})

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        packed = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        return packed if any(len(s) for s in seqs) else self._nothing(packed)

    def pack_masked(self, values: Any, mask: Any, config: dict[str, Any], cp_rank: int, *,
                    need_roll: bool = False, pad_value: Any = 0) -> Packed:
        packed = super().pack_masked(values, mask, config, cp_rank, need_roll=need_roll,
                                     pad_value=pad_value)
        return packed if np.asarray(mask).any() else self._nothing(packed)

    def plan(self, seqlens: Any, config: dict[str, Any]) -> dict[str, Any]:
        meta = super().plan(seqlens, config)
        if any(int(n) for n in seqlens):
            return meta
        return {"cu_seqlens_padded": np.zeros(1, np.int32),
                "seqlens_padded": np.zeros(0, np.int32), "total": 0, "local_rows": 0}


class RowsPerRankTarget(ReferenceTarget):
    """A packer that reports the rows of one rank as its `total` (the whole buffer is cp_size
    times that: R-CONSUMER-1, R-SHARD-4), and divides by the batch's token count, so an
    all-empty batch crashes (ZeroDivisionError)."""

    name = "rows-per-rank"
    description = "tests/suite: total = rows per rank; crashes on an all-empty batch"
    declared = Declared(features=CORE | {"bucket", "fp8", "min_local_rows"},
                        validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        tokens = sum(int(s.shape[0]) for s in seqs)
        meta = {**got.meta, "padding_ratio": got.meta["total"] / tokens}  # 1 / 0 when all empty
        meta["total"] = meta["local_rows"]
        return Packed(got.rows, got.position_ids, meta)


class NarrowFp8Target(ReferenceTarget):
    """A packer that pads for FP8 only up to tp * cp = 8: from 16 ranks on it packs as without
    FP8, so a TP slice holds a number of rows the FP8 GEMMs cannot take (R-CONSUMER-5)."""

    name = "narrow-fp8"
    description = "tests/suite: FP8 padding dropped for tp * cp >= 16"
    declared = Declared(features=CORE | {"bucket", "fp8", "fp8_recipes", "min_local_rows"},
                        validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        if int(config.get("tp_size", 1)) * int(config.get("cp_size", 1)) >= 16:
            config = {**config, "fp8": False}
        return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)


class CpAlignTarget(ReferenceTarget):
    """A packer of megatron-core's convention: each sequence aligned to cp only, tp on the
    total (convention seq_align='cp'), so its rows differ from the spec default's."""

    name = "cp-align"
    description = "tests/suite: the reference with seq_align='cp'"
    declared = Declared(features=CORE | {"bucket"}, convention={"seq_align": "cp"},
                        validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        return super().pack(seqs, {**config, "seq_align": "cp"}, cp_rank, need_roll=need_roll,
                            pad_value=pad_value)


class WrongMaxSeqlenTarget(ReferenceTarget):
    """The reference with max_seqlen one too large: every other field is the spec's."""

    name = "wrong-max-seqlen"
    description = "tests/suite: the reference with max_seqlen + 1"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        return Packed(got.rows, got.position_ids,
                      {**got.meta, "max_seqlen": int(got.meta["max_seqlen"]) + 1})


class LastTokenLossMaskTarget(ReferenceTarget):
    """The reference with a loss mask that also reads each sequence's last real token, whose
    label a flat roll takes from the next sequence."""

    name = "last-token-loss-mask"
    description = "tests/suite: the reference, loss mask True at every real row"

    def loss_mask(self, meta: dict[str, Any], config: dict[str, Any], cp_rank: int
                  ) -> np.ndarray:
        return np.array([s.real for s in _sources(meta, config, cp_rank)], dtype=bool)


class PadsOneBlockMoreTarget(ReferenceTarget):
    """A plan one total modulus M longer than the spec's (R-TOTAL-4), the surplus on the last
    sequence as the spec places it, and the rows and position ids right on that plan; with
    `reversed_rows`, each rank's rows also in reverse order (wrong on any plan)."""

    name = "pads-one-block-more"
    description = "tests/suite: the reference packing M more rows than the smallest total"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)
    reversed_rows = False

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        cfg = reference.PackConfig(**config)
        spec = reference.plan_thd([len(s) for s in seqs], cfg)
        more = {**config, "fixed_total": spec.total + cfg.total_modulus}
        got = super().pack(seqs, more, cp_rank, need_roll=need_roll, pad_value=pad_value)
        rows = got.rows[::-1].copy() if self.reversed_rows else got.rows
        return Packed(rows, got.position_ids, got.meta)


class PadsMoreReversedTarget(PadsOneBlockMoreTarget):
    name = "pads-more-reversed"
    description = "tests/suite: pads-one-block-more with its rows reversed"
    reversed_rows = True


class SegmentIdsZeroTarget(ReferenceTarget):
    """tail='segment' as its fixed convention, with every position id of the padding segment 0
    (R-TAIL-2: its offsets); all else the spec's. A bucket makes that segment."""

    name = "segment-ids-zero"
    description = "tests/suite: tail='segment', the padding segment's position ids all 0"
    declared = Declared(features=CORE | {"bucket"}, convention={"tail": "segment"},
                        validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        config = {**config, "tail": "segment"}
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        return Packed(got.rows, _segment_ids_zeroed(got, config, cp_rank, len(seqs)), got.meta)


class PaddingOffByOneTarget(ReferenceTarget):
    """Every padding row holds pad_value + 1 (not pad_value for bool; R-ROW-2); all else the
    spec's."""

    name = "padding-off-by-one"
    description = "tests/suite: padding rows pad_value + 1"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        rows = np.asarray(got.rows).copy()
        pad = [k for k, src in enumerate(_sources(got.meta, config, cp_rank)) if not src.real]
        rows[pad] = ~rows[pad] if rows.dtype == np.bool_ else rows[pad] + 1
        return Packed(rows, got.position_ids, got.meta)


class ManySequencesPaddingTarget(PaddingOffByOneTarget):
    """Padding rows pad_value + 1 only in a batch of at least four sequences (R-ROW-2): the
    first input to show it is rarely the smallest."""

    name = "many-sequences-padding"
    description = "tests/suite: padding rows pad_value + 1 from four sequences on"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        if len(seqs) < 4:
            return ReferenceTarget.pack(self, seqs, config, cp_rank, need_roll=need_roll,
                                        pad_value=pad_value)
        return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
