"""Fake targets whose verdicts must be earned (tests/suite/test_earned_verdicts.py): glue that
must hand a dtype over, crashes that must count, two rules that must both show, and adapters
that misuse the "not declared" exception."""

from __future__ import annotations

from typing import Any

import numpy as np

from thd_packing.conformance.protocol import VALIDATION, Declared, NotDeclared, Packed
from thd_packing.conformance.targets.reference import ReferenceTarget
from thd_packing.peers import _tokens

CORE = frozenset({"need_roll", "pad_value"})
ELSEWHERE = frozenset(VALIDATION)



class FloatIdsTokenTarget:
    """A token-id packer through the peers' shared glue (`peers/_tokens.py`), one rank, no tp:
    right, except that its ids come back as float32 where a sequence has exactly 3 tokens (a
    consumer's embedding lookup refuses them)."""

    name = "float-ids"
    description = "tests/suite: a token-id packer giving float32 ids on some batches"
    declared = Declared(lacks=frozenset({"tensor_parallel", "zigzag", "contiguous"}),
                        validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        _tokens.refuse_undeclared(config, "the float-ids fake")
        vocab = _tokens.Vocabulary(seqs, pad_value)
        ids = np.asarray([i for seq in vocab.ids for i in seq], dtype=np.int64)
        if any(len(seq) == 3 for seq in vocab.ids):
            ids = ids.astype(np.float32)
        lengths = [len(seq) for seq in vocab.ids]
        pos = np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return Packed(vocab.rows(ids), pos, {"cu_seqlens_padded": cu})


class CrashesOnLongTarget(ReferenceTarget):
    """The reference, but an IndexError on every batch holding a sequence of 5 tokens or more
    (a crash on a valid input, outside the packer's own validation)."""

    name = "crashes-on-long"
    description = "tests/suite: the reference crashing on sequences of 5 tokens or more"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        if any(np.asarray(s).shape[0] >= 5 for s in seqs):
            return self.fail()
        return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)

    def fail(self) -> Packed:
        return [][0]  # type: ignore[no-any-return]


class DeepNotImplementedError(NotImplementedError):
    """A library's own NotImplementedError subclass (pyarrow's ArrowNotImplementedError)."""


class DeepNotImplementedTarget(CrashesOnLongTarget):
    """As CrashesOnLongTarget, but the crash is a NotImplementedError subclass raised deep in
    the packer's library: a crash, not a rejection of the input nor a declined feature."""

    name = "deep-not-implemented"

    def fail(self) -> Packed:
        raise DeepNotImplementedError("this kernel has no int64 path")


class TwoTotalRulesTarget(ReferenceTarget):
    """The reference's pack with a wrong total in its metadata on batches of two sequences or
    more: one row past the bucket's modulus M > 1 on an even number of sequences (not a
    multiple of M, R-TOTAL-2), one whole M too many on an odd number (not the smallest,
    R-TOTAL-4). Both are raised by the same check, from the same line."""

    name = "two-total-rules"
    description = "tests/suite: a total off by one row or by one bucket"
    declared = Declared(features=CORE | {"bucket"}, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        if len(seqs) < 2 or config.get("bucket") is None:
            return got
        from thd_packing import reference

        modulus = reference.PackConfig(**config).total_modulus
        if len(seqs) % 2 == 0 and modulus == 1:
            return got  # every total is a multiple of 1: no R-TOTAL-2 to break
        extra = 1 if len(seqs) % 2 == 0 else modulus
        return Packed(got.rows, got.position_ids, {**got.meta, "total": got.meta["total"] + extra})


class RefusesDeclaredBucketTarget(ReferenceTarget):
    """Declares `bucket` but raises NotDeclared for it: a usage error naming the feature."""

    name = "refuses-declared-bucket"
    description = "tests/suite: declares bucket, raises NotDeclared for it"
    declared = Declared(features=CORE | {"bucket"}, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        if config.get("bucket") is not None:
            raise NotDeclared("this packer has no bucket")
        return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)


class LenientPadTarget(ReferenceTarget):
    """Honours pad_value but leaves its checks to its callers (validated_elsewhere
    "pad_value", as a token-id glue whose packer never sees the value): a value the
    reference refuses packs as 0."""

    name = "lenient-pad"
    description = "tests/suite: the reference, pad_value's checks left to its callers"
    declared = Declared(features=CORE, validated_elsewhere=frozenset({"pad_value"}))

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        try:
            return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        except (TypeError, ValueError) as exc:
            if "pad_value" not in str(exc):
                raise
        return super().pack(seqs, config, cp_rank, need_roll=need_roll)


class AlignsDespiteNoneTarget(ReferenceTarget):
    """Declares seq_align='none' (fixed, beside tail='segment', as the sequence-sharding
    packers do) but reports its first sequence padded by one row taken from the padding
    segment, where that segment has two rows or more and the sequence an odd length: a
    per-sequence alignment where there is none, R-ALIGN-6."""

    name = "aligns-despite-none"
    description = "tests/suite: seq_align='none' declared, the first sequence padded"
    declared = Declared(features=CORE | {"seq_align_none", "tail_segment"},
                        convention={"seq_align": "none", "tail": "segment"},
                        validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        got = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        padded = np.asarray(got.meta["seqlens_padded"]).copy()
        b = len(seqs)
        if padded.size <= b or padded[b] < 2 or np.asarray(seqs[0]).shape[0] % 2 == 0:
            return got
        padded[0] += 1
        padded[b] -= 1
        cu = np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
        return Packed(got.rows, got.position_ids,
                      {**got.meta, "seqlens_padded": padded, "cu_seqlens_padded": cu})


class PerLayoutAlignTarget(ReferenceTarget):
    """slime's convention: zigzag pads each sequence to 2cp (seq_align='cp'), the all-gather
    contiguous path aligns only the total (seq_align='none'); it packs by the layout whatever
    the config's seq_align, so a case drawn with the other layout's value fails."""

    name = "per-layout-align"
    description = "tests/suite: seq_align 'cp' under zigzag, 'none' under contiguous"
    declared = Declared(features=CORE | {"seq_align_cp", "seq_align_none"},
                        convention={"seq_align": {"zigzag": "cp", "contiguous": "none"}},
                        validated_elsewhere=ELSEWHERE)
    by_layout = {"zigzag": "cp", "contiguous": "none"}

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        align = self.by_layout[config.get("cp_layout", "zigzag")]
        return super().pack(seqs, {**config, "seq_align": align}, cp_rank,
                            need_roll=need_roll, pad_value=pad_value)


class WrongPlanAndRowsTarget(ReferenceTarget):
    """Packs as if tp were twice the config's (other rows, another plan), and reports the
    spec's cu_seqlens_padded on every rank but the first: at cp > 1 ranks that disagree, a plan
    the row map cannot lay out, so its rows cannot be judged apart from it."""

    name = "wrong-plan-and-rows"
    description = "tests/suite: rows and plan of 2 * tp, ranks disagreeing on the plan"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        wide = {**config, "tp_size": 2 * int(config.get("tp_size", 1))}
        got = super().pack(seqs, wide, cp_rank, need_roll=need_roll, pad_value=pad_value)
        if cp_rank == 0:
            return got
        spec = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        return Packed(got.rows, got.position_ids,
                      {**got.meta, "cu_seqlens_padded": spec.meta["cu_seqlens_padded"]})


class RefusesItsUnpackTarget(ReferenceTarget):
    """Has unpack() (a capability by presence) but raises NotDeclared from it."""

    name = "refuses-its-unpack"
    description = "tests/suite: unpack() present, raising NotDeclared"
    declared = Declared(features=CORE, validated_elsewhere=ELSEWHERE)

    def unpack(self, shards: Any, meta: Any, config: dict[str, Any]) -> Any:
        raise NotDeclared("this packer cannot unpack")
