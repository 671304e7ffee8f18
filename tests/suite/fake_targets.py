"""Small conformance targets that exercise the suite's own machinery (tests/suite/).

Each wraps the literal reference, so every check it is given passes unless the wrapper
changes something on purpose.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import reference
from conformance.contract import segment_batch, segment_lengths
from conformance.protocol import VALIDATION, Declared, Packed, plain_meta
from conformance.targets.impl import ImplTarget
from conformance.targets.reference import ReferenceTarget, plan_from_meta

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
        if config.get("tail") == "segment" and pos is not None:
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


class SegmentNoTpTarget(ReferenceTarget):
    """A packer of verl's FSDP kind: no tensor parallelism, no zigzag (declared lacking, and
    refused with NotImplementedError as a real adapter would), the total padding always as its
    own trailing segment (convention tail='segment')."""

    name = "segment-no-tp"
    description = "tests/suite: the reference with tail='segment', no tp, no zigzag"
    declared = Declared(features=CORE | {"bucket", "min_local_rows", "fp8"},
                        lacks=frozenset({"tensor_parallel", "zigzag"}),
                        convention={"tail": "segment"}, validated_elsewhere=ELSEWHERE)

    @staticmethod
    def _own(config: dict[str, Any]) -> dict[str, Any]:
        if int(config.get("tp_size", 1)) > 1:
            raise NotImplementedError("tp_size > 1 is not supported")
        if int(config.get("cp_size", 1)) > 1 and config.get("cp_layout", "zigzag") == "zigzag":
            raise NotImplementedError("zigzag is not supported")
        return {**config, "tail": "segment"}

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        return super().pack(seqs, self._own(config), cp_rank, need_roll=need_roll,
                            pad_value=pad_value)

    def plan(self, seqlens: Any, config: dict[str, Any]) -> dict[str, Any]:
        return super().plan(seqlens, self._own(config))


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


class NoPositionsTarget(ReferenceTarget):
    """The reference without position ids under CP (`Packed(position_ids=None)`, which the
    protocol allows: AReaL hands the model unsharded position ids, so no rank has its own)."""

    name = "no-positions"
    description = "tests/suite: the reference, no position ids when cp_size > 1"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        packed = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        if int(config.get("cp_size", 1)) == 1:
            return packed
        return Packed(packed.rows, None, packed.meta, packed.labels, packed.loss_mask)


class RunOnPositionsTarget(NoPositionsTarget):
    """Position ids at cp = 1 only, and there one run over the whole buffer, never restarting
    at a sequence: every sequence after the first has wrong positions (R-CONSUMER-10), and no
    segment can be derived from them (R-PID-2)."""

    name = "run-on-positions"
    description = "tests/suite: position ids at cp = 1 only, never restarting"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        packed = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        if packed.position_ids is None:
            return packed
        run_on = np.arange(len(packed.position_ids), dtype=packed.position_ids.dtype)
        return Packed(packed.rows, run_on, packed.meta, packed.labels, packed.loss_mask)


class NoPositionIdsTarget(ReferenceTarget):
    """The reference giving no position ids on any rank (`Packed(position_ids=None)`)."""

    name = "no-position-ids"
    description = "tests/suite: the reference, never any position ids"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        packed = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        return Packed(packed.rows, None, packed.meta, packed.labels, packed.loss_mask)


class LastTokenLossMaskTarget(ReferenceTarget):
    """The reference with a loss mask that also reads each sequence's last real token, whose
    label a flat roll takes from the next sequence."""

    name = "last-token-loss-mask"
    description = "tests/suite: the reference, loss mask True at every real row"

    def loss_mask(self, meta: dict[str, Any], config: dict[str, Any], cp_rank: int
                  ) -> np.ndarray:
        rows = reference.row_map(plan_from_meta(meta), reference.PackConfig(**config), cp_rank)
        return np.array([s.real for s in rows], dtype=bool)


class OmittingTarget(ReferenceTarget):
    """The reference packing only the non-empty sequences (an all-empty batch: its first),
    declaring zero-length omitted (spec R-META-8): B' segments, rows unchanged. No unpack (from
    B' segments it cannot place the empty sequences, R-CONSUMER-13), no mask form."""

    name = "omitting"
    description = "tests/suite: the reference, zero-length sequences omitted from the metadata"
    declared = Declared(features=ReferenceTarget.declared.features,
                        convention={"zero_length": "omit"}, validated_elsewhere=ELSEWHERE)
    unpack = distributed_unpack = pack_masked = None

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        kept = segment_batch(seqs, "omit") or list(seqs[:1])  # K >= B' = 0 allows one
        return super().pack(kept, config, cp_rank, need_roll=need_roll, pad_value=pad_value)

    def plan(self, seqlens: Any, config: dict[str, Any]) -> dict[str, Any]:
        return super().plan(segment_lengths(seqlens, "omit") or list(seqlens[:1]), config)


class OmitsToNothingTarget(OmittingTarget):
    """`OmittingTarget` that packs a batch of only empty sequences as nothing: no row, no
    segment (B' = 0, R-META-8), the total 0, as a stream that makes no window does."""

    name = "omits-to-nothing"
    description = "tests/suite: zero-length omitted, an empty pack for a batch without a token"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        packed = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        if any(len(s) for s in seqs):
            return packed
        none = packed.rows[:0]
        return Packed(none, packed.position_ids[:0], {
            "cu_seqlens_padded": np.zeros(1, np.int32), "cu_seqlens": np.zeros(1, np.int32),
            "seqlens": np.zeros(0, np.int32), "seqlens_padded": np.zeros(0, np.int32),
            "max_seqlen": 0, "total": 0, "local_rows": 0})


class OmitsAndCrashesOnAllEmptyTarget(OmittingTarget):
    """`OmittingTarget` crashing on a batch of only empty sequences, as TRL's padding-free
    collator does (IndexError); everything else it packs as the reference does."""

    name = "omits-crashes-on-all-empty"
    description = "tests/suite: zero-length omitted, IndexError on a batch of only empty ones"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        packed = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        if not any(len(s) for s in seqs):  # valid input (the reference checked it)
            raise IndexError("index 0 is out of bounds for dimension 0 with size 0")
        return packed

    def plan(self, seqlens: Any, config: dict[str, Any]) -> dict[str, Any]:
        meta = super().plan(seqlens, config)
        if not any(int(n) for n in seqlens):
            raise IndexError("index 0 is out of bounds for dimension 0 with size 0")
        return meta


class OmitsAndRefusesAllEmptyTarget(OmittingTarget):
    """`OmittingTarget` rejecting a batch of only empty sequences as an empty batch, as
    transformers' collator does (R-META-8's MAY: ValueError naming the batch)."""

    name = "omits-refuses-all-empty"
    description = "tests/suite: zero-length omitted, ValueError on a batch of only empty ones"
    message = "every sequence of the batch is empty: nothing to pack"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        if not any(len(s) for s in seqs):
            raise ValueError(self.message)
        return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)


class OmitsAndRefusesAllEmptyUnnamedTarget(OmitsAndRefusesAllEmptyTarget):
    """The same refusal with a message that does not name the batch."""

    name = "omits-refuses-all-empty-unnamed"
    message = "nothing to pack"


class KeepsButDeclaresOmitTarget(ReferenceTarget):
    """The reference (B segments, empty ones included) declaring zero-length omitted."""

    name = "keeps-declares-omit"
    description = "tests/suite: the reference declaring zero-length omitted, keeping them"
    declared = OmittingTarget.declared
    unpack = distributed_unpack = None


class PackedNoEmptyRowsTarget(ImplTarget):
    """impl with its Megatron packed form (capability `packed_seqs`), declared without
    zero-length sequences and refusing a mask row without a True entry, as a packer that lacks
    them may: it is never sent one."""

    name = "packed-no-empty-rows"
    description = "tests/suite: impl, lacking zero-length sequences in the packed form"
    declared = Declared(features=ImplTarget.declared.features, lacks=frozenset({"zero_length"}))

    def packed_preprocess(self, values: Any, mask: Any, config: dict[str, Any],
                          cp_rank: int) -> Any:
        if not np.asarray(mask).any(axis=1).all():
            raise ValueError("packed_preprocess: a mask row without a True entry")
        return super().packed_preprocess(values, mask, config, cp_rank)


class PackedNoTensorParallelTarget(ImplTarget):
    """impl with its Megatron packed form, declared without tensor parallelism and FP8 and
    refusing both: it is never sent either, the all-empty masks included."""

    name = "packed-no-tp"
    description = "tests/suite: impl, lacking tp and FP8 in the packed form"
    declared = Declared(features=ImplTarget.declared.features - {"fp8", "fp8_recipes"},
                        lacks=frozenset({"tensor_parallel"}))

    def packed_preprocess(self, values: Any, mask: Any, config: dict[str, Any],
                          cp_rank: int) -> Any:
        if config.get("tp_size", 1) != 1 or config.get("fp8"):
            raise ValueError(f"packed_preprocess: config {config}")
        return super().packed_preprocess(values, mask, config, cp_rank)


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
        rmap = reference.row_map(plan_from_meta(got.meta), reference.PackConfig(**config),
                                 cp_rank)
        pos = np.asarray(got.position_ids).copy()
        pos[[k for k, src in enumerate(rmap) if src.seq >= len(seqs)]] = 0
        return Packed(got.rows, pos, got.meta)


class PaddedCuSeqlensAtCp1Target(ReferenceTarget):
    """cu_seqlens and max_seqlen at cp = 1 only, and there the padded boundaries as the real
    ones (R-CONSUMER-8) and max_seqlen 1 (R-CONSUMER-9); without `at_cp1`, on no rank."""

    name = "padded-cu-seqlens-at-cp1"
    description = "tests/suite: cu_seqlens = cu_seqlens_padded and max_seqlen 1, at cp = 1 only"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)
    at_cp1 = True

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        meta = {k: v for k, v in got.meta.items() if k not in ("cu_seqlens", "max_seqlen")}
        if self.at_cp1 and int(config.get("cp_size", 1)) == 1:
            meta.update(cu_seqlens=got.meta["cu_seqlens_padded"], max_seqlen=1)
        return Packed(got.rows, got.position_ids, meta)


class NoCuSeqlensTarget(PaddedCuSeqlensAtCp1Target):
    name = "no-cu-seqlens"
    description = "tests/suite: the reference without cu_seqlens and max_seqlen"
    at_cp1 = False


class PaddingOffByOneTarget(ReferenceTarget):
    """Every padding row holds pad_value + 1 (not pad_value for bool; R-ROW-2); all else the
    spec's."""

    name = "padding-off-by-one"
    description = "tests/suite: padding rows pad_value + 1"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        plan = plan_from_meta(got.meta)
        rmap = reference.row_map(plan, reference.PackConfig(**config), cp_rank)
        rows = np.asarray(got.rows).copy()
        pad = [k for k, src in enumerate(rmap) if not src.real]
        rows[pad] = ~rows[pad] if rows.dtype == np.bool_ else rows[pad] + 1
        return Packed(rows, got.position_ids, got.meta)
