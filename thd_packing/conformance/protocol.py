"""The adapter protocol: how the suite talks to a packer under test (conformance/README.md).

A target is any object with a `pack` method returning `Packed`, a `name`, and a `declared`
(`Declared`: what the suite cannot see by looking); its optional methods are found by presence
(`METHODS`). The suite speaks NumPy: an adapter converts a batch to its packer's types, calls
it, converts back, and lets the packer's exceptions propagate. Hand every value (sizes,
`cp_rank`: NumPy integers, bools, strings... in the type and rejection tests) to the packer
unchanged; never convert or check it in the adapter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# PackConfig as keyword arguments (a field left out: the spec's default); invalid values too.
Config = dict[str, Any]
# The plan as plain data: NumPy arrays seqlens, seqlens_padded, cu_seqlens, cu_seqlens_padded;
# ints max_seqlen, total, local_rows, num_seqs (B). Only cu_seqlens_padded is required.
Meta = dict[str, Any]


@dataclass(frozen=True)
class Packed:
    """One CP rank's pack, as plain data. `meta` keys a packer lacks are left out: the checks
    that need them are declined, never failed. `position_ids` None: the packer gives none."""

    rows: np.ndarray  # [local_rows, *trail], in the packer's dtype
    position_ids: np.ndarray | None  # [local_rows] integers
    meta: Meta  # "cu_seqlens_padded" required; the other Meta keys where the packer has them
    labels: np.ndarray | None = None  # [local_rows] next-token labels beside the rows
    loss_mask: np.ndarray | None = None  # [local_rows], 1 where the loss reads the label


@dataclass(frozen=True)
class Declared:
    """What the suite cannot find out by looking. The defaults: the spec's defaults, every base
    feature, no optional feature, every validation done by the packer itself."""

    features: frozenset[str] = frozenset()  # optional features supported (FEATURES)
    lacks: frozenset[str] = frozenset()  # base features it does not have (BASE_FEATURES)
    convention: dict[str, Any] = field(default_factory=dict)  # fields it always packs with,
    # whatever the config says, e.g. {"tail": "segment"} (CONVENTION_VALUES)
    validated_elsewhere: frozenset[str] = frozenset()  # validation left to callers (VALIDATION)
    max_rows: int | None = None  # tests that would build more rows are declined
    cost: float = 1.0  # > 1 scales the example count down for a slow packer


class NotDeclared(NotImplementedError):
    """Raised by an adapter asked for what it does not declare (a feature, a convention value,
    a base feature it lacks): the suite never asks for one, so reaching it on a case whose every
    feature is declared is a usage error of the adapter, naming the feature. A plain
    `NotImplementedError` from the packer itself is a crash (R-CONSUMER-17)."""


class OutputRefused(Exception):
    """Glue that plays the packer's consumer (an embedding lookup of token ids, a loss reading
    label ids) refuses the packer's output as produced: a failure of `rule` (e.g.
    R-CONSUMER-16, floating token ids). Raised by `refuse_output` where the suite does not
    collect refusals."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


_SINKS: list[Callable[[str, str], None]] = []


def refuse_output(message: str, rule: str) -> None:
    """Glue playing a consumer: that consumer refuses this output (a failure of `rule`). Where
    the suite collects refusals (`collecting_refusals`) it is recorded and the glue goes on, so
    the pack's other rules are still judged; elsewhere it raises OutputRefused."""
    if _SINKS:
        _SINKS[-1](message, rule)
        return
    raise OutputRefused(message, rule)


@contextlib.contextmanager
def collecting_refusals() -> Iterator[list[tuple[str, str]]]:
    """Within: `refuse_output` records (message, rule) in the yielded list."""
    found: list[tuple[str, str]] = []
    _SINKS.append(lambda message, rule: found.append((message, rule)))
    try:
        yield found
    finally:
        _SINKS.pop()


FEATURES: dict[str, str] = {
    "bucket": "config bucket=N pads the total to a multiple of lcm(A, N) (R-TOTAL-2)",
    "fp8": "config fp8=True: FP8 per-sequence and total alignment (R-ALIGN-2, R-TOTAL-1)",
    "fp8_recipes": "config fp8='tensor' | 'mxfp8' | 'block' | 'nvfp4' (R-FP8-1, R-TOTAL-1)",
    "min_local_rows": "config min_local_rows=N: at least N local rows per rank (R-TOTAL-3)",
    "need_roll": "pack(need_roll=True) builds next-token labels (spec section 8)",
    "pad_value": "pack(pad_value=v) honours a non-zero pad value (R-ROW-2)",
    "static_metadata": "config max_num_seqs=N and max_seqlen='total' (R-STATIC-1..3)",
    "tail_segment": "config tail='segment': the total padding as its own segment (R-TAIL-1/2)",
    "seq_align_cp": "config seq_align='cp': sequences aligned to cp * f only (R-ALIGN-5)",
    "large_totals": "totals of 2**25 rows take seconds (not a packer that walks row by row)",
    "forged_plan_checks": "unpack rejects a plan whose fields contradict each other (R-ERR-11, "
    "a MAY)",
    "seq_align_none": "config seq_align='none': no per-sequence alignment, contiguous layout or "
    "cp = 1 only (R-ALIGN-6)",
    "tail_tokens": "config tail='tokens': each padding row of T - S a one-row segment with "
    "position id 0 (R-TAIL-3, R-TAIL-4)",
    "fixed_total": "config fixed_total=N: every pack exactly N rows, more a ValueError "
    "(R-TOTAL-7, R-ERR-15)",
    "labels_ignore": "config labels='ignore' with ignore_index: need_roll's labels line up with "
    "the inputs, ignore_index at each last token and on padding (R-LABEL-1, R-CONSUMER-15)",
}
BASE_FEATURES: dict[str, str] = {
    "tensor_parallel": "tp_size > 1 (tp in the alignment, sequence parallelism)",
    "zigzag": "cp_layout='zigzag' with cp_size > 1 (TE's load-balanced THD sharding)",
    "contiguous": "cp_layout='contiguous' with cp_size > 1 (R-SHARD-3)",
    "zero_length": "sequences of length 0 anywhere in the batch (R-IN-2, R-ROW-3)",
    "trailing_dims": "sequences with trailing dimensions [L_i, *trail] (R-IN-1)",
    "tail_last": "config tail='last' (the default): the total padding onto the last sequence",
    "seq_align_tp_cp": "config seq_align='tp_cp' (the default): sequences aligned to tp * cp * f",
    "labels_roll": "config labels='roll' (the default): need_roll's labels rolled in the pack, "
    "position ids following the label's source (spec section 8)",
}
# Validation a packer may leave to its callers; each is checked (R-ERR-*) unless declared in
# `validated_elsewhere`, under the capability name `<key>_checks`.
VALIDATION: dict[str, str] = {
    "config": "bucket, min_local_rows, cp_layout and fp8 of the config (R-ERR-1..4)",
    "parallel_state": "tp_size, cp_size and cp_rank (R-ERR-1, R-ERR-2, R-ERR-5)",
    "batch": "the batch container, element types, dtypes and trailing shapes (R-ERR-1/7/9)",
    "unpack": "the shard list given to unpack (R-ERR-11)",
    "need_roll_type": "need_roll is a real bool (R-ERR-1)",
    "pad_value": "pad_value's type, and its value representable in the batch's dtype (R-ERR-1, "
    "R-ERR-10)",
}
# Optional methods, found by presence (a callable attribute; one set to None is absent), each
# under the capability name the tests use: without it, its tests are declined. Signatures (S: a
# list of arrays; `...`: `*, need_roll=False, pad_value=0`; P: Packed; an np.ndarray argument
# becomes your array type, any other object is handed to your packer as it is):
#   plan(seqlens, config) -> Meta;  unpack(shards: S, meta, config) -> S  (R-UNPACK-1)
#   resolve_engine_config(**flags) -> config;  loss_mask(meta, config, cp_rank) -> bool
#       [local_rows]  (R-LABEL-3)
#   pack_masked(values [B, S, *trail], mask [B, S], config, cp_rank, ...) -> P  (R-IN-7)
#   plan_as_is(seqlens, config), pack_as_is(seqs, config, cp_rank), unpack_as_is(shards, meta,
#       config, *, plan=None, config_obj=None): those arguments handed over unchanged
#   native_scalar(value) -> your 0-d array
#   megatron_preprocess(seqs, config, cp_rank, *, need_roll=False), the same for _kwargs,
#       _with_params(seqs, config, cp_rank, params_cls) -> (rows[None], PackedSeqParams
#       fields as a dict, position_ids[None]);
#       megatron_preprocess_as_is(input_ids, config, cp_rank, **adapter)  (R-MEG-1..7)
#   megatron_postprocess(output, meta, config, *, params=None, **adapter) -> S
#   distributed_unpack(rows, meta, config, cp_rank, group) -> (S, local gradient)  (R-MEG-3)
#   packed_preprocess(values, mask, config, cp_rank) -> (rows [1, R, *trail], params dict);
#       packed_gathered(shards, cu_padded, mask, config, cp_rank), packed_distributed(rows,
#       cu_padded, mask, config, cp_rank, group) -> ([B, S, *trail], gradient);
#       packed_postprocess(output, cu_padded, mask, config, *, params=None, **adapter)
#       -> [B, S, *trail]  (R-MEG-8, R-MEG-9)
METHODS: dict[str, str] = {
    "plan": "plan", "unpack": "unpack", "engine": "resolve_engine_config",
    "loss_mask": "loss_mask", "mask_form": "pack_masked", "api_type_checks": "pack_as_is",
    "native_scalars": "native_scalar",
    "megatron": "megatron_preprocess", "megatron_checks": "megatron_preprocess_as_is",
    "kwargs_params": "megatron_preprocess_kwargs", "packed_seqs": "packed_preprocess",
    "distributed": "distributed_unpack",
}

# The convention fields (spec 1.1) and, for each valid value, the feature or base feature a
# target needs for it (None: every target). A fixed `convention` makes its value the only one.
CONVENTION_DEFAULTS: dict[str, Any] = {
    "tail": "last", "seq_align": "tp_cp", "max_num_seqs": None, "max_seqlen": "exact",
    "labels": "roll",
}
CONVENTION_VALUES: dict[str, dict[Any, str | None]] = {
    "tail": {"last": "tail_last", "segment": "tail_segment", "tokens": "tail_tokens"},
    "seq_align": {"tp_cp": "seq_align_tp_cp", "cp": "seq_align_cp", "none": "seq_align_none"},
    "max_seqlen": {"exact": None, "total": "static_metadata"},
    "labels": {"roll": "labels_roll", "ignore": "labels_ignore"},
}
# The fields a `convention` may fix, besides the zero-length convention (R-META-8, read by the
# contract, R-CONSUMER-14) and a bucket the packer always pads to (AReaL's 256-row page: the
# suite draws only that one).
FIXED_FIELDS = ("tail", "seq_align", "labels")
FIXED_BUCKET = "bucket"
# A fixed field may depend on the layout: a dict of both layouts to a value, e.g. slime's
# {"seq_align": {"zigzag": "cp", "contiguous": "none"}} (zigzag pads each sequence to 2cp, the
# all-gather contiguous path aligns only the total). In the internal view each pair is a
# capability "<field>@<layout>=<value>" (`layout_conventions`).
LAYOUTS = ("zigzag", "contiguous")
ZERO_LENGTH = ("keep", "omit")
# In the internal view of a target that omits zero-length sequences (R-META-8): a batch of
# only empty ones has no sequence left to keep, a degenerate batch that only the contract tier's
# named cases give such a target (no strategy draws it for any target); a case written with
# such a batch is declined under ALL_EMPTY.
OMITS_ZERO_LENGTH = "zero_length=omit"
ALL_EMPTY = "all_empty_batch"
FP8_RECIPES = ("tensor", "mxfp8", "block", "nvfp4")
# The features of the non-default conventions (a Megatron view keeps the defaults).
CONVENTION_CAPABILITIES = frozenset({"tail_segment", "seq_align_cp", "fp8_recipes",
                                     "static_metadata", "seq_align_none", "tail_tokens",
                                     "fixed_total", "labels_ignore"})
# Every name the suite's internal view may hold.
CAPABILITIES = frozenset(FEATURES) | frozenset(BASE_FEATURES) | frozenset(METHODS) | frozenset(
    f"{key}_checks" for key in VALIDATION)


def declared_of(target: Any) -> Declared:
    """The target's `declared` (the defaults where it has none)."""
    return getattr(target, "declared", None) or Declared()


def problems(target: Any) -> list[str]:
    """Why `target` does not follow the protocol (empty: it does)."""
    roles = [what for what in ("pack", "bin", "partition") if hasattr(target, what)]
    out = [] if hasattr(target, "name") else ["no 'name'"]
    if not roles:
        out.append("no 'pack' (a packer), 'bin' (a binner) or 'partition' (a balancer)")
    decl = declared_of(target)
    if not isinstance(decl, Declared):
        return [*out, f"declared is {type(decl).__name__}, not conformance.protocol.Declared"]
    for attr, known in (("features", FEATURES), ("lacks", BASE_FEATURES),
                        ("validated_elsewhere", VALIDATION)):
        unknown = set(getattr(decl, attr)) - set(known)
        if unknown:
            out.append(f"unknown {attr} {sorted(unknown)} (known: {sorted(known)})")
    for key, value in decl.convention.items():
        if key == "zero_length" and value in ZERO_LENGTH:
            continue
        if key == FIXED_BUCKET:
            if type(value) is not int or value < 1:
                out.append(f"convention bucket={value!r}: a fixed bucket is an int >= 1")
            continue
        if key in FIXED_FIELDS and isinstance(value, dict):
            out += _layout_problems(key, value)
            continue
        if key in FIXED_FIELDS and value in CONVENTION_VALUES[key]:
            dropped = sorted(set(decl.features) & {cap for v, cap in CONVENTION_VALUES[key].items()
                                                   if cap is not None and v != value})
            if dropped:
                out.append(f"features {dropped} contradict convention {key}={value!r}: the "
                           f"packer always packs {key}={value!r}, so it cannot do them")
        if key not in FIXED_FIELDS or value not in CONVENTION_VALUES[key]:
            allowed = "; ".join(f"{name} {list(CONVENTION_VALUES[name])}"
                                for name in FIXED_FIELDS)
            out.append(f"convention {key}={value!r}: a fixed convention names {allowed}; "
                       f"zero_length {list(ZERO_LENGTH)}; bucket an int >= 1")
    return out


def _layout_problems(key: str, value: dict[Any, Any]) -> list[str]:
    """Why a per-layout convention is not one: both layouts, each to a value of the field;
    seq_align='none' and tail='tokens' are not a zigzag convention (R-ERR-14)."""
    allowed = list(CONVENTION_VALUES[key])
    if set(value) != set(LAYOUTS) or any(v not in CONVENTION_VALUES[key] for v in value.values()):
        return [f"convention {key}={value!r}: per layout, a dict of both layouts "
                f"{list(LAYOUTS)}, each to one of {allowed}"]
    if value["zigzag"] in ("none", "tokens"):
        return [f"convention {key}={value!r}: {key}={value['zigzag']!r} is not valid under "
                "the zigzag layout (R-ERR-14)"]
    return []


def layout_conventions(caps: frozenset[str]) -> dict[str, dict[str, str]]:
    """The fields a target fixes per layout, {field: {layout: value}} (from its capabilities)."""
    out: dict[str, dict[str, str]] = {}
    for cap in caps:
        key, at, rest = cap.partition("@")
        if at and key in FIXED_FIELDS:
            layout, _, value = rest.partition("=")
            out.setdefault(key, {})[layout] = value
    return out


def zero_length_of(target: Any) -> str:
    """The declared zero-length convention: "omit" where the target's metadata leaves
    zero-length sequences out (spec R-META-8), else "keep"."""
    return str(declared_of(target).convention.get("zero_length", "keep"))


def has_method(target: Any, cap: str) -> bool:
    return callable(getattr(target, METHODS[cap], None))


def capabilities(target: Any) -> frozenset[str]:
    """The suite's internal view of a target: its features, the base features it does not
    lack, the validation it does itself (`<key>_checks`), its optional methods, and its fixed
    convention (each fixed value its only one: the other values' features taken away)."""
    decl = declared_of(target)
    caps = set(decl.features) | (set(BASE_FEATURES) - set(decl.lacks))
    caps |= {f"{key}_checks" for key in VALIDATION if key not in decl.validated_elsewhere}
    caps |= {cap for cap in METHODS if has_method(target, cap)}
    for key, value in decl.convention.items():
        if key == FIXED_BUCKET:  # the feature, and its one value (`fixed_bucket`)
            caps |= {"bucket", f"fixed_bucket={value}"}
            continue
        if key == "zero_length":
            if value == "omit":
                caps.add(OMITS_ZERO_LENGTH)
            continue
        if key not in CONVENTION_VALUES:
            continue
        chosen = set(value.values()) if isinstance(value, dict) else {value}
        if isinstance(value, dict):
            caps |= {f"{key}@{layout}={v}" for layout, v in value.items()}
        for other, cap in CONVENTION_VALUES[key].items():
            if cap is not None:
                (caps.add if other in chosen else caps.discard)(cap)
    return frozenset(caps)


def fixed_bucket(caps: frozenset[str]) -> int | None:
    """The bucket a target always pads to (its `convention["bucket"]`), else None."""
    for cap in caps:
        if cap.startswith("fixed_bucket="):
            return int(cap.partition("=")[2])
    return None


def describe(cap: str) -> str:
    """What a capability of the internal view means (the report's reason for a decline)."""
    if cap.startswith("bucket="):
        return f"the target always pads to a bucket of {cap.partition('=')[2]} rows"
    if cap == ALL_EMPTY:
        return ("the target omits zero-length sequences (R-META-8): a batch of only empty ones "
                "is judged by the contract tier's named degenerate cases")
    if cap in METHODS:
        return f"the target has no {METHODS[cap]}()"
    if "@" in cap:
        setting, _, layout = cap.partition("@")
        return f"{setting} under the {layout} layout: the target's convention there differs"
    if cap.endswith("_checks") and cap[:-len("_checks")] in VALIDATION:
        return f"validated elsewhere: {VALIDATION[cap[:-len('_checks')]]}"
    return FEATURES.get(cap) or BASE_FEATURES.get(cap) or cap


_PLAN_ARRAYS = ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded")


def plain_meta(plan: Any) -> Meta:
    """Meta from any object with the spec's plan attributes (tensors are turned into NumPy)."""
    meta: Meta = {}
    for key in _PLAN_ARRAYS:
        value = getattr(plan, key)
        meta[key] = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    for key in ("max_seqlen", "total", "local_rows", "num_seqs"):
        if hasattr(plan, key):
            meta[key] = getattr(plan, key)
    return meta


def plan_fields(meta: Meta, array: Callable[[Any], Any]) -> dict[str, Any]:
    """A Plan's keyword arguments from `meta`, the arrays through `array` (`plain_meta`'s
    inverse). A meta without num_seqs is a 1.0 plan: 0, which a Plan reads as K = B."""
    return {**{key: array(meta[key]) for key in _PLAN_ARRAYS},
            **{key: int(meta[key]) for key in ("max_seqlen", "total", "local_rows")},
            "num_seqs": int(meta["num_seqs"]) if "num_seqs" in meta else 0}
