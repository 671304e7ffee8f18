"""The adapter protocol: how the suite talks to an implementation under test.

The suite speaks NumPy at the boundary so that one set of strategies and one oracle
(`reference/`) serve every target. An adapter converts NumPy batches into its implementation's
own types, calls it, and converts the results back. This module holds the vocabulary (the
capabilities, base features and conventions a target declares) and the `Target` boundary;
targets/methods.py holds the optional methods, one protocol per capability group. See
conformance/README.md for a worked example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

# A PackConfig as plain keyword arguments: tp_size, cp_size, cp_layout, fp8, bucket,
# min_local_rows, and the convention fields tail, seq_align, max_num_seqs, max_seqlen (spec
# R-IN-3; see CONVENTION_VALUES). Invalid values are passed through on purpose: the adapter must
# hand them to its implementation unchanged, so that rejection tests reach its validation.
Config = dict[str, Any]

# The plan as plain data: keys seqlens, seqlens_padded, cu_seqlens, cu_seqlens_padded (NumPy
# arrays in the dtype the implementation produced), max_seqlen, total, local_rows, num_seqs (B,
# spec 1.1; as the implementation returned them; the spec wants Python ints). A target that
# does not produce a field (verl has no real-boundary cu_seqlens) leaves the key out; the
# suite then cannot check it.
Meta = dict[str, Any]

# Optional features. The strategies never draw a feature the target does not declare, and a
# test whose subject is such a feature is "declined" in the report (a skip with the reason),
# never a failure.
CAPABILITIES: dict[str, str] = {
    "bucket": "config bucket=N pads the total to a multiple of lcm(A, N) (R-TOTAL-2)",
    "fp8": "config fp8=True: FP8 per-sequence and total alignment (R-ALIGN-2, R-TOTAL-1)",
    "min_local_rows": "config min_local_rows=N: at least N local rows per rank (R-TOTAL-3)",
    "zero_length": "sequences of length 0 anywhere in the batch (R-IN-2, R-ROW-3)",
    "trailing_dims": "sequences with trailing dimensions [L_i, *trail] (R-IN-1)",
    "need_roll": "pack() builds next-token labels with need_roll=True (spec section 8)",
    "pad_value": "pack() honours a non-zero pad_value (R-ROW-2)",
    "plan": "plan(seqlens, config) computes the metadata without data (huge lengths, R-ERR-8)",
    "engine": "resolve_engine_config(**flags) maps engine flags to a config (spec section 10)",
    "contiguous": "cp_layout='contiguous' with cp_size > 1 (R-SHARD-3)",
    "unpack": "unpack(shards, meta, config) (spec section 9)",
    "megatron": "megatron_preprocess(...) returns the PackedSeqParams view (R-MEG-1, R-MEG-2)",
    "distributed": "distributed_unpack(...) gathers through a real process group (R-MEG-3)",
    "config_checks": "the target validates the PackConfig fields it is given: bucket, "
    "min_local_rows, cp_layout and fp8 (R-ERR-1, R-ERR-2, R-ERR-3, R-ERR-4); absent where the "
    "config arrives as an engine's already-validated ints",
    "parallel_state_checks": "tp_size, cp_size and cp_rank are validated by the target "
    "(R-ERR-1, R-ERR-2, R-ERR-5); absent where they come from Megatron's parallel state",
    "unpack_checks": "unpack validates the shard list (R-ERR-11); absent where the shards "
    "arrive through a collective that enforces their shapes",
    "batch_checks": "the batch container, element types, dtypes and trailing shapes are "
    "validated by the target (R-ERR-1, R-ERR-7, R-ERR-9); absent where a nested tensor "
    "constructor enforces them",
    "batch_forms": "pack_as(form, ...) packs the same batch from each of the target's other "
    "input containers, listed in its `batch_forms` attribute (R-IN-1: any ordered sequence)",
    "row_map": "row_map(meta, config, cp_rank) returns the target's row map, compared with "
    "reference.row_map without any data (R-SHARD-1..3, R-ALIGN-4)",
    "forged_plan_checks": "unpack rejects with ValueError a plan whose seqlens, seqlens_padded, "
    "cu_seqlens_padded and total contradict each other (R-ERR-11: MAY)",
    "flat_batch_checks": "pack_flat(values, lengths, ...) packs flat values [sum L, *trail] with "
    "lengths= passed through as given, so rejection tests reach the validation of lengths "
    "(R-IN-1, R-ERR-1, R-ERR-6..9)",
    "megatron_checks": "megatron_preprocess_as_is(input_ids, ...) hands input_ids to the "
    "adapter unchanged, megatron_preprocess_with_params(seqs, config, cp_rank, params_cls) "
    "runs it with another PackedSeqParams class, and megatron_postprocess(output, meta, ...) "
    "runs postprocess on one "
    "process with the output as given and PackedSeqParams fields overridable (R-MEG-1, R-MEG-3, "
    "R-ERR-1, R-ERR-11); with `packed_seqs` also packed_postprocess(output, cu_padded, mask, "
    "config, *, params, **adapter), postprocess_packed_seqs likewise (R-MEG-8, R-MEG-9)",
    "api_type_checks": "pack_as_is / unpack_as_is hand a config or plan that is not the "
    "implementation's PackConfig / Plan to it unchanged (R-ERR-1: TypeError naming the field)",
    "local_gather": "gathered_unpack(shards, meta, config, cp_rank) runs the distributed "
    "unpack of one rank in this process, its collective answered with every rank's rows, and "
    "fails if it gathers over a group other than the CP group it was given (R-MEG-3)",
    "simulated_megatron": "megatron_preprocess_newer(seqs, config, cp_rank, *, dynamic) and "
    "gathered_unpack_dynamic(shards, meta, config, cp_rank) run the adapter under a simulated "
    "newer megatron-core (PackedSeqParams.cp_partition_mode; dynamic CP groups for "
    "local_cp_size), so the contiguous layout (R-MEG-2) and dynamic CP reach the adapter's code "
    "on an installed release that lacks them",
    "kwargs_params": "megatron_preprocess_kwargs(seqs, config, cp_rank, *, need_roll) runs "
    "preprocess with a PackedSeqParams whose constructor takes **kwargs (verl's test stub): "
    "every field passed (R-MEG-4), contiguous cp > 1 accepted, verl's slot values (R-MEG-6, -7)",
    "packed_seqs": "verl's mask entry points (R-MEG-8, R-MEG-9): packed_preprocess(values, mask, "
    "config, cp_rank) -> (rows [1, R, *trail], PackedSeqParams view); packed_gathered(shards, "
    "cu_padded, mask, config, cp_rank) and, with `distributed`, packed_distributed(rows, "
    "cu_padded, mask, config, cp_rank, group) -> (output [B, S, *trail], local gradient)",
    "mask_form": "pack_masked(values, mask, config, cp_rank, *, need_roll, pad_value) packs a "
    "padded batch [B, S, *trail] with a bool mask [B, S], sequence i = values[i][mask[i]], "
    "the mask passed as given so that rejection tests reach its validation (R-IN-7)",
    "native_scalars": "native_scalar(value) returns the implementation's own 0-d array holding a "
    "Python scalar, used as a config field or cp_rank (spec section 0: integers, bools)",
    "large_totals": "pack and unpack of a total of 2**25 rows (32 MiB of int8 over 2 ranks) "
    "takes seconds; a target that walks rows one by one (the reference) declines it",
    "float8": "pack_float8(bits, dtype, config, cp_rank, *, pad_value) packs uint8 arrays viewed "
    "as the implementation's float8 dtype `dtype` ('float8_e4m3fn', 'float8_e5m2'; NumPy has "
    "none) and returns the rows viewed back as uint8 (R-IN-1: any dtype)",
    "valueless_device": "pack_valueless(form, seqs, config, cp_rank, ...) and "
    "unpack_valueless(shards, meta, config) run on the target's device that holds no values "
    "(torch: `meta`; names in the `devices` attribute, host first): shapes, dtypes and devices "
    "come back as ArraySpec, and forms whose lengths live there are rejected (R-DEV-1..3); with "
    "`megatron_checks`, megatron_postprocess_valueless(output, meta, config) too (R-MEG-3)",
    "native_dtypes": "pack_viewed(bits, dtype, config, cp_rank) packs unsigned-int arrays "
    "viewed as each of the target's dtypes in its `other_dtypes` attribute, which are none of "
    "bool, integer, floating or complex (torch: bits8, quint8, float4_e2m1fn_x2): TypeError "
    "naming the dtype (R-ERR-1)",
    "rejected_forms": "pack_as(form, seqs, ...) builds each input form of the target's "
    "`rejected_forms` attribute (form -> (rule, word)), containers the target must refuse, such "
    "as a strided nested tensor: the rule's error class, its message naming `word` (R-ERR-1, "
    "R-ERR-9)",
    # Conventions (spec 1.1): the values of the convention fields beyond the spec's defaults.
    "tail_segment": "config tail='segment': the total padding T - S as its own padding-only "
    "segment at index B, position ids from 0 (R-TAIL-1, R-TAIL-2)",
    "seq_align_cp": "config seq_align='cp': each sequence aligned to cp * f only, tp on the total "
    "(R-ALIGN-5, R-TOTAL-2)",
    "fp8_recipes": "config fp8='tensor' | 'mxfp8' | 'block' | 'nvfp4': the recipe's total "
    "alignment tp * cp * q, no per-sequence FP8 alignment (R-FP8-1, R-TOTAL-1, R-ALIGN-2); "
    "fp8=True is capability `fp8`",
    "static_metadata": "config max_num_seqs=N (N segments, zero-length entries past the real "
    "content) and max_seqlen='total' (plan.max_seqlen = T) (R-STATIC-1..3, R-ERR-13)",
}

# Features every target is assumed to have unless it names them in an optional `declines`
# attribute (a frozenset): a packer without tensor parallelism (FSDP, DeepSpeed) or without
# zigzag CP sharding (Ulysses, ring attention with contiguous slices). The strategies then never
# draw them, and tests that need them are reported "declined", like a missing capability.
BASE_FEATURES: dict[str, str] = {
    "tensor_parallel": "tp_size > 1 is drawn (tp in the alignment, sequence parallelism)",
    "zigzag": "cp_layout='zigzag' with cp_size > 1 (TE's load-balanced THD sharding)",
    "tail_last": "config tail='last' (the spec's default): the total padding onto the last "
    "sequence (R-TOTAL-5)",
    "seq_align_tp_cp": "config seq_align='tp_cp' (the spec's default): each sequence aligned to "
    "A0 = tp * cp * f (R-ALIGN-1, R-ALIGN-5)",
}

# The convention fields of PackConfig (spec 1.1) and, for each valid value, the capability or
# base feature a target needs for it (None: every target has it). A target declares what it
# packs with in one of two ways, both reaching the same capability set:
# - capabilities (`tail_segment`, `seq_align_cp`, `fp8_recipes`, `static_metadata`) for values
#   it supports beside the defaults, and `declines` (`tail_last`, `seq_align_tp_cp`) for
#   defaults it does not support;
# - `convention`, an optional dict of the fields it always packs with, whatever the config says
#   (verl's FSDP path: {"tail": "segment"}; megatron-core: {"seq_align": "cp"}): each value is
#   then its only one (the capability added, the default declined).
# The strategies draw only supported values; a config that leaves a field out means the
# target's fixed value where it has one (the suite fills it in for the target and the
# reference alike), else the spec default. So the differential tier compares a target with the
# reference under the target's own convention, and only real differences remain.
CONVENTION_DEFAULTS: dict[str, Any] = {
    "tail": "last", "seq_align": "tp_cp", "max_num_seqs": None, "max_seqlen": "exact",
}
CONVENTION_VALUES: dict[str, dict[Any, str | None]] = {
    "tail": {"last": "tail_last", "segment": "tail_segment"},
    "seq_align": {"tp_cp": "seq_align_tp_cp", "cp": "seq_align_cp"},
    "max_seqlen": {"exact": None, "total": "static_metadata"},
}
FP8_RECIPES = ("tensor", "mxfp8", "block", "nvfp4")
# The capabilities of spec 1.1's non-default conventions (a view of a target that keeps the
# defaults, such as a Megatron adapter with verl's convention, draws with caps minus these).
CONVENTION_CAPABILITIES = frozenset({"tail_segment", "seq_align_cp", "fp8_recipes",
                                     "static_metadata"})


@dataclass(frozen=True)
class ArraySpec:
    """An array the suite cannot read: one on a device that holds no values (capability
    `valueless_device`). `dtype` in NumPy's spelling where NumPy has it (`float32`), else the
    target's own name; `device` one of the target's `devices`."""

    shape: tuple[int, ...]
    dtype: str
    device: str


@runtime_checkable
class Target(Protocol):
    """What the suite needs from an implementation under test.

    `name` shows in the pytest header and names the report files
    (reports/conformance-<name>.json/.md); `capabilities` is a subset of `CAPABILITIES`;
    `description` is one line for the header. Optional attributes: `max_rows` (int or None, the
    default: no limit): tests whose packed total would exceed it are not run (the int32-limit
    tests build totals of 2**31 rows); `skip_reasons` (capability -> why it is declined);
    `cost` (float > 1 scales the example count down for slow targets); `declines` (base
    features it lacks); `convention` (the convention fields it always packs with, see
    CONVENTION_VALUES).

    Conversion rules (both directions):
    - In `pack`, convert every element of `seqs` that is a `np.ndarray` without copying where
      your array type allows (`torch.from_numpy`), so that the suite can see in-place writes to
      inputs; pass any other object (and a `seqs` that is not a list or tuple) through unchanged,
      so that rejection tests reach your validation.
    - Return rows and position ids as NumPy arrays of the dtype your implementation produced.
    - Let your implementation's exceptions propagate unchanged.

    The methods of the optional capabilities are documented in targets/methods.py.
    """

    name: str
    description: str
    capabilities: frozenset[str]

    def pack(
        self,
        seqs: Any,
        config: Config,
        cp_rank: Any,
        *,
        need_roll: Any = False,
        pad_value: Any = 0,
    ) -> tuple[np.ndarray, np.ndarray, Meta]:
        """Rows, position ids and plan of rank `cp_rank` (spec sections 4 to 8)."""
        ...


def plain_meta(plan: Any) -> Meta:
    """Meta from any object with the spec's plan attributes (tensors are turned into NumPy)."""
    meta: Meta = {}
    for key in ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded"):
        value = getattr(plan, key)
        meta[key] = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    for key in ("max_seqlen", "total", "local_rows", "num_seqs"):
        if hasattr(plan, key):  # num_seqs: spec 1.1 (R-META-7)
            meta[key] = getattr(plan, key)
    return meta


def convention_of(target: Any) -> dict[str, Any]:
    """The target's fixed `convention` (empty where it has none), checked against
    CONVENTION_VALUES: only `tail` and `seq_align` can be fixed (ValueError otherwise)."""
    conv = dict(getattr(target, "convention", None) or {})
    for key, value in conv.items():
        if key not in ("tail", "seq_align") or value not in CONVENTION_VALUES[key]:
            raise ValueError(f"convention {key}={value!r}: a fixed convention names tail "
                             f"{list(CONVENTION_VALUES['tail'])} or seq_align "
                             f"{list(CONVENTION_VALUES['seq_align'])}")
    return conv


def declared_capabilities(target: Any) -> frozenset[str]:
    """The capabilities a target has: its `capabilities`, the base features it does not
    decline, and its fixed `convention` (each fixed value its only one: the value's capability
    added, the other values' capabilities and base features taken away)."""
    caps = set(target.capabilities)
    base = set(BASE_FEATURES) - set(getattr(target, "declines", ()) or ())
    for key, value in convention_of(target).items():
        for other, cap in CONVENTION_VALUES[key].items():
            if cap is None:
                continue
            if other == value:
                (base if cap in BASE_FEATURES else caps).add(cap)
            else:
                base.discard(cap)
                caps.discard(cap)
    return frozenset(caps | base)

