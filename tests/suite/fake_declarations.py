"""Small conformance targets that declare, omit or give less than the spec's packer: declined
features and validation, omitted zero-length sequences, optional outputs (tests/suite/).

Each wraps the literal reference (or impl), so every check it is given passes unless the
wrapper changes something on purpose; the targets with a bug of their value are in
fake_targets.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from thd_packing.conformance.contract import segment_batch, segment_lengths
from thd_packing.conformance.protocol import VALIDATION, Declared, Packed
from thd_packing.conformance.targets.impl import ImplTarget
from thd_packing.conformance.targets.reference import ReferenceTarget

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
