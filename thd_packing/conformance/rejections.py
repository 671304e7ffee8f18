"""Spec section 11's rejections as one table keyed by rule ID (run by test_rejections.py).

Each row is one call: the entry point (`api`), its input (built from the target's base config
when the row runs), the class the spec expects (None: a valid look-alike, accepted) and what
the message must name: a field ("a|b": either word), a number, or an object (`Named`). A row is
filed under the rule its failure disproves; `also` adds rules to charge, `cites` rules it is
about without deciding them. rejection_forms.py holds the other input forms' rows; `rows()`
gives both; tests/conformance/test_rejection_table.py checks every row against the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .strategies import INT32_MAX, rows_bound

T, V = TypeError, ValueError


@dataclass(frozen=True)
class Named:
    """The message names this object: its type's name or its repr (spec section 11)."""

    obj: Any


@dataclass(frozen=True)
class IfCap:
    """`item` must be named only where the target has capability `cap`."""

    cap: str
    item: Any


@dataclass(frozen=True)
class Row:
    name: str
    api: str  # pack, plan, pack_masked, unpack, pack_as_is, unpack_as_is, plan_as_is,
    # packed_preprocess, packed_postprocess, packed_gathered, native_pack
    args: Callable[[dict[str, Any]], dict[str, Any]]  # base config -> keyword input of `api`
    error: type[Exception] | None
    names: tuple[Any, ...] = ()
    needs: tuple[str, ...] = ()
    also: tuple[str, ...] = ()  # charged with the key rule when the row fails
    cites: tuple[str, ...] = ()  # cited only: the rules the row is about, decided by others
    rows: int = 0  # rows a packer without the check would build (a target's max_rows)


def base_config(caps: frozenset[str]) -> dict[str, Any]:
    """Two CP ranks in a layout the target has (zigzag, else contiguous), else one rank: a
    rejection must not fail on a layout the target declines."""
    layout = "zigzag" if "zigzag" in caps else "contiguous" if "contiguous" in caps else None
    return {"tp_size": 1, "cp_size": 2 if layout else 1, "cp_layout": layout or "zigzag",
            "fp8": False, "bucket": None, "min_local_rows": None}


def two_sequences(dtype: str = "int64") -> list[np.ndarray]:
    """The batch every pack row varies one field against."""
    return [np.arange(5).astype(dtype), np.arange(3).astype(dtype)]


def length_rows(seqlens: Any) -> int:
    """The rows a packer without length checks would build for `seqlens`."""
    try:
        return sum(max(int(n), 0) for n in seqlens if not isinstance(n, bool | float | str))
    except (TypeError, ValueError):
        return 0


TABLE: dict[str, list[Row]] = {}


def _add(rule: str, *rows: Row) -> None:
    TABLE.setdefault(rule, []).extend(rows)


def _class_rule(cls: type[Exception] | None, type_rule: str, value_rule: str,
                accepted_rule: str) -> str:
    return type_rule if cls is T else accepted_rule if cls is None else value_rule


def _by_class(value_rule: str, rows: list[Row], type_rule: str = "R-ERR-1") -> None:
    """File each row under the rule its class disproves (TypeError: `type_rule`); an accepted
    look-alike under `value_rule`."""
    for row in rows:
        _add(type_rule if row.error is T else value_rule, row)


def _pack(**call: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Pack two sequences with one field of the base config (or one call argument) changed."""
    config = {k: call.pop(k) for k in list(call) if k not in ("seqs", "cp_rank", "need_roll",
                                                              "pad_value")}

    def args(base: dict[str, Any]) -> dict[str, Any]:
        rank = call.get("cp_rank", 0)
        if rank in ("neg", "cp", "cp+3"):  # relative to the base config's cp_size
            rank = {"neg": -1, "cp": base["cp_size"], "cp+3": base["cp_size"] + 3}[rank]
        return {"seqs": call.get("seqs", two_sequences()), "config": {**base, **config},
                "cp_rank": rank, "need_roll": call.get("need_roll", False),
                "pad_value": call.get("pad_value", 0)}
    return args


def _fixed(**kwargs: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda base: dict(kwargs)


def _values(field: str, outcomes: list[tuple[Any, type[Exception] | None]],
            **row: Any) -> list[Row]:
    return [Row(f"{field}={v!r}", "pack", _pack(**{field: v}), cls,
                (field,) if cls is not None else (), **row) for v, cls in outcomes]


# ----------------------------------------------------------------------------------------------
# The config (R-IN-3): sizes, bucket, min_local_rows, cp_layout, fp8

SIZES = [(0, V), (-1, V), (-8, V), (True, T), (False, T), (1.0, T), (2.0, T), ("2", T),
         (None, T), (np.int64(0), V), (np.int64(2), None), (np.bool_(True), T)]
for _field in ("tp_size", "cp_size"):
    _by_class("R-ERR-2", _values(_field, SIZES, needs=("parallel_state_checks",),
                                 cites=("R-IN-3",)))
    _add("R-ERR-8", Row(f"{_field}=2**40", "pack", _pack(**{_field: 2**40}), V,
                        needs=("parallel_state_checks",), cites=("R-IN-3", "R-ERR-2")))
_by_class("R-ERR-3", _values("bucket", [
    (0, V), (-1, V), (-512, V), (True, T), (False, T), (1.5, T), (512.0, T), ("512", T),
    (np.int32(7), None), (np.float64(512.0), T), ([512], T)],
    needs=("config_checks", "bucket"), cites=("R-IN-3",)), type_rule="R-ERR-3")
_by_class("R-ERR-2", _values("min_local_rows", [
    (0, V), (-3, V), (True, T), (2.0, T), ("4", T), (np.int64(3), None), (np.int64(0), V)],
    needs=("config_checks", "min_local_rows"), cites=("R-IN-3",)))
_by_class("R-ERR-4", _values("cp_layout", [
    ("Zigzag", V), ("", V), ("ring", V), ("contiguous ", V), (None, T), (1, T), (b"zigzag", T),
    (True, T)], needs=("config_checks",), cites=("R-IN-3",)))
_by_class("R-ERR-1", _values("fp8", [
    (1, T), (0, T), (None, T), ("True", V), (np.bool_(True), T), (1.0, T)],
    needs=("config_checks",), cites=("R-IN-3",)))

# Totals above INT32_MAX (erratum E-8: int32 metadata would wrap), through pack and plan.
ABOVE_INT32: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("bucket-2^31", {"bucket": 2**31}, ("bucket",)),
    ("min_local_rows-2^31", {"min_local_rows": 2**31}, ("min_local_rows",)),
    ("cp2-bucket-int32max", {"cp_size": 2, "bucket": INT32_MAX}, ("bucket",)),
    ("tp-2^62", {"tp_size": 2**62}, ("tensor_parallel",)),
    ("tp-cp-2^31", {"tp_size": 2**31, "cp_size": 2**31}, ("tensor_parallel",)),
    ("cp4-tp2-bucket-2^30+1", {"cp_size": 4, "tp_size": 2, "bucket": 2**30 + 1}, ("bucket",)),
]
for _name, _config, _needs in ABOVE_INT32:
    _add("R-ERR-8", Row(
        f"pack-total-{_name}", "pack", _pack(seqs=[np.arange(3, dtype=np.int8)],
                                             **{"cp_size": 1, **_config}),
        V, needs=_needs, also=("R-TOTAL-6",),
        rows=rows_bound([3], {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", **_config})),
        Row(f"plan-total-{_name}", "plan",
            (lambda c: lambda base: {"seqlens": [5, 3], "config": {**base, "cp_size": 1, **c}})(
                _config), V, needs=("plan", *_needs), also=("R-TOTAL-6",)))

# The target's own 0-d scalars (capability native_scalars) as sizes and cp_rank: an int is
# accepted with the reference's rows, a bool or a float is not an integer (spec section 0).
for _field in ("tp_size", "cp_size", "bucket", "min_local_rows", "cp_rank"):
    for _value in (1, True, False, 1.0):
        _needs_f = ("native_scalars",) + ((_field,) if _field in ("bucket", "min_local_rows")
                                          else ())
        _row = Row(f"native-{_field}={_value!r}", "native_pack",
                   (lambda f, v: lambda base: {"field": f, "value": v, "config": dict(base)})(
                       _field, _value),
                   None if type(_value) is int else T, (_field,) if type(_value) is not int
                   else (), needs=_needs_f, cites=("R-IN-3", "R-IN-4"))
        _add("R-ERR-1" if _row.error is T else "R-IN-3", _row)

# ----------------------------------------------------------------------------------------------
# The call arguments (R-IN-4, R-IN-5): cp_rank, need_roll, pad_value

_by_class("R-ERR-5", [
    Row(f"cp_rank={v!r}", "pack", _pack(cp_rank=v), cls, ("cp_rank",) if cls else (),
        needs=("parallel_state_checks",), cites=("R-IN-4",))
    for v, cls in [("neg", V), ("cp", V), ("cp+3", V), (True, T), (False, T), (1.0, T),
                   ("0", T), (None, T), (np.int64(0), None)]])
_add("R-ERR-1", *[
    Row(f"need_roll={v!r}", "pack", _pack(need_roll=v), T, ("need_roll",),
        needs=("need_roll", "need_roll_type_checks"), cites=("R-IN-4",))
    for v in [1, 0, None, "True", np.bool_(True), 1.0]])

# pad_value per dtype: the same values for every dtype, then the dtype's edges. Outcome codes
# (T TypeError, V ValueError, A accepted) in the order of the values.
_COMMON_PADS: list[Any] = ["0", None, 1j, np.float32(1.0), [0], np.int8(0)]


def _pad_values(dtype: str) -> list[Any]:
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return [*_COMMON_PADS, 2, -1, 0.5, math.nan, math.inf, 1.0, np.float64(1.0)]
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return [*_COMMON_PADS, int(info.max) + 1, int(info.min) - 1, 1.5, math.nan, math.inf,
                -math.inf, 2**70, float(info.max) + 2.0**12, -0.5, float(int(info.min))]
    return [*_COMMON_PADS, 70000.0, 1e39, -1e39, 2**1024 - 1, math.nan, -math.inf, 0.1]


PAD_OUTCOMES = {
    "bool": "TTTTTTVVVVVAA", "int8": "TTTTTTVVVVVVVVVA", "uint8": "TTTTTTVVVVVVVVVA",
    "int16": "TTTTTTVVVVVVVVVA", "uint16": "TTTTTTVVVVVVVVVA", "int32": "TTTTTTVVVVVVVVVA",
    "uint32": "TTTTTTVVVVVVVVVA", "int64": "TTTTTTVVVVVVVVVA", "uint64": "TTTTTTVVVVVVVVVA",
    "float16": "TTTTTTVVVVAAA", "float32": "TTTTTTAVVVAAA", "float64": "TTTTTTAAAVAAA",
    "complex64": "TTTTTTAVVVAAA",
}
_CODES: dict[str, type[Exception] | None] = {"T": T, "V": V, "A": None}
for _dtype, _codes in PAD_OUTCOMES.items():
    _by_class("R-ERR-10", [
        Row(f"pad_value={v!r}-{_dtype}", "pack",
            _pack(seqs=two_sequences(_dtype), pad_value=v), _CODES[code],
            ("pad_value",) if code != "A" else (),
            needs=("pad_value", "pad_value_checks") if code != "A" else ("pad_value",),
            cites=("R-IN-4", "R-IN-5"))
        for v, code in zip(_pad_values(_dtype), _codes, strict=True)])

# ----------------------------------------------------------------------------------------------
# The batch (R-IN-1): container, elements, trailing shapes, dtypes; messages show the values

_GOOD = two_sequences()
BATCHES: list[tuple[str, Any, type[Exception] | None, tuple[Any, ...]]] = [
    ("not-a-list", {0: _GOOD[0]}, T, ("batch|seqs", "dict")),
    ("empty", [], V, ("batch|seqs",)),
    ("list-element", [_GOOD[0], [1, 2, 3]], T, ("list",)),
    ("scalar-element", [_GOOD[0], 3], T, ()),
    ("none-element", [None], T, ()),
    ("zero-dim", [np.array(5)], V, ("batch|seqs",)),
    ("trail-mismatch", [np.zeros((2, 3)), np.zeros((2, 4))], V, ()),
    ("trail-mismatch-values", [np.zeros((2, 11)), np.zeros((3, 13))], V, (11, 13)),
    ("trail-rank", [np.zeros((2, 11)), np.zeros((3, 11, 1))], V, (11, 1)),
    ("dtype-mismatch", [np.zeros(2, np.int64), np.zeros(2, np.int32)], T, ("int64", "int32")),
    ("str-element", [np.zeros(2), "ab"], T, ("str",)),
    ("float-list-element", [np.zeros(2), [1.0, 2.0]], T, ("list",)),
    ("tuple-ok", tuple(_GOOD), None, ()),
    ("ndarray-batch", np.zeros((2, 3)), T, ()),
]
for _name, _seqs, _cls, _shown in BATCHES:
    _add(_class_rule(_cls, "R-ERR-1", "R-ERR-9", "R-IN-1") if _name != "empty" else "R-ERR-7",
         Row(f"batch-{_name}", "pack", _pack(seqs=_seqs), _cls, _shown,
             needs=("batch_checks",), also=("R-IN-1",)))

# ----------------------------------------------------------------------------------------------
# Lengths given to plan (R-ERR-6, R-ERR-8): negative, beyond int32 / int64, not a 1-D integer
# sequence, narrow integer arrays whose sum does not fit their dtype

for _bad, _cls in [(-1, V), (-100, V), (INT32_MAX + 1, V), (2**40, V), (True, T), (1.5, T),
                   ("3", T), (None, T), (np.int64(3), None), (np.int32(-1), V)]:
    for _lens in ([_bad], [4, _bad], [4, 4, _bad, 4]):
        _by_class("R-ERR-8" if isinstance(_bad, int) and _bad > INT32_MAX else "R-ERR-6",
                  [Row(f"seqlens={_lens!r}", "plan", _fixed(seqlens=_lens, config={}), _cls,
                       ("seqlens",) if _cls else (), needs=("plan",),
                       rows=length_rows(_lens))])
_add("R-ERR-7", Row("seqlens=[]", "plan", _fixed(seqlens=[], config={}), V, ("seqlens",),
                    needs=("plan",)))
LENGTH_EDGES: list[tuple[str, Any, type[Exception] | None, tuple[Any, ...]]] = [
    ("2^63", [2**63], V, ("seqlens",)), ("-2^63-1", [-(2**63) - 1], V, ("seqlens",)),
    ("2^64", [4, 2**64], V, ("seqlens", 2**64)), ("-2^63,2^64", [-(2**63), 2**64], V, ()),
    ("7,2^64", [7, 2**64], V, (2**64,)), ("200,2^64", [200, 2**64], V, (2**64,)),
    ("str", "44", T, ("seqlens",)), ("None", None, T, ("seqlens",)), ("set", {4}, T, ()),
    ("2-D", np.array([[4, 4]]), V, ("seqlens",)), ("bool-array", np.array([True, False]), T, ()),
    ("float-array", np.array([4.0]), T, ()), ("empty-array", np.array([], np.int64), V, ()),
    ("uint8-sum-300", np.array([200, 100], np.uint8), None, ()),
    ("uint16-sum-80000", np.array([40000, 40000], np.uint16), None, ()),
    ("int32-sum-2^31", np.array([2**30, 2**30], np.int32), V, ()),
    ("int32-sum-int32max", np.array([2**31 - 9, 8], np.int32), None, ()),
]
for _name, _lens, _cls, _shown in LENGTH_EDGES:
    _rule = _class_rule(_cls, "R-ERR-1", "R-ERR-8" if _name != "empty-array" else "R-ERR-7",
                        "R-ERR-8")
    _add(_rule, Row(f"seqlens-{_name}", "plan", _fixed(seqlens=_lens, config={}), _cls, _shown,
                    needs=("plan",), cites=("R-ERR-6", "R-TOTAL-6"), rows=length_rows(_lens)))

# ----------------------------------------------------------------------------------------------
# Spec 1.1's convention fields (R-ERR-12) and B > max_num_seqs (R-ERR-13)

CONVENTIONS: dict[str, tuple[str, list[tuple[Any, type[Exception] | None]]]] = {
    "tail": ("tail_segment", [(None, T), (1, T), (True, T), (b"last", T), ("Last", V), ("", V),
                              ("segments", V), ("last ", V)]),
    "seq_align": ("seq_align_cp", [(None, T), (2, T), (False, T), ("tp", V), ("TP_CP", V),
                                   ("", V), ("cp ", V)]),
    "max_seqlen": ("static_metadata", [(None, T), (0, T), (True, T), ("max", V), ("Total", V),
                                       ("exact ", V)]),
    "max_num_seqs": ("static_metadata", [(True, T), (False, T), (1.5, T), (4.0, T), ("4", T),
                                         ([4], T), (0, V), (-1, V), (np.int64(0), V),
                                         (np.int64(4), None), (np.int32(3), None),
                                         (2**31, V), (2**40, V)]),
    "fp8": ("fp8_recipes", [("MXFP8", V), ("fp8", V), ("", V), ("tensor ", V), ("e4m3", V),
                            ("delayed", V), (b"block", T)]),
    "labels": ("labels_ignore", [(None, T), (1, T), (True, T), ("Ignore", V), ("shift", V),
                                 ("", V)]),
    "ignore_index": ("labels_ignore", [(True, T), (-100.0, T), ("-100", T), (None, T)]),
    "fixed_total": ("fixed_total", [(True, T), (16.0, T), ("16", T), (0, V), (-16, V),
                                    (2**31, V), (7, V)]),
}
for _field, (_cap, _outcomes) in CONVENTIONS.items():
    for _value, _cls in _outcomes:
        _add("R-ERR-1" if _cls is T else "R-ERR-12", Row(
            f"{_field}={_value!r}", "pack", _pack(**{_field: _value}), _cls,
            (_field,) if _cls else (), needs=("config_checks", _cap), cites=("R-IN-3",),
            rows=_value if isinstance(_value, int) and _value > INT32_MAX else 0))

# A fixed total too small for the batch (R-ERR-15): [5, 3] needs 8 rows at cp 1, 12 at cp 2.
_add("R-ERR-15", Row("fixed_total-too-small", "pack", _pack(fixed_total=4), V, ("fixed_total", 4),
                     needs=("fixed_total",), cites=("R-TOTAL-7",)))
_add("R-ERR-15", Row("fixed_total-too-small-plan", "plan",
                     _fixed(seqlens=[5, 3], config={"fixed_total": 4}), V, ("fixed_total", 4),
                     needs=("fixed_total", "plan"), cites=("R-TOTAL-7",)))

# need_roll under labels='ignore': an ignore_index the batch's dtype cannot hold (R-ERR-16).
for _dtype, _ignore, _ignore_cls in [("uint8", -100, V), ("bool", -100, V), ("int8", 300, V),
                                     ("uint8", 255, None), ("bool", 1, None)]:
    _add("R-ERR-16", Row(
        f"ignore_index={_ignore}-{_dtype}", "pack",
        _pack(seqs=two_sequences(_dtype), labels="ignore", ignore_index=_ignore, need_roll=True),
        _ignore_cls, ("ignore_index",) if _ignore_cls else (),
        needs=("config_checks", "need_roll", "labels_ignore"), cites=("R-LABEL-2",)))

# (B, max_num_seqs, tail): too many sequences, and the edges that are accepted.
for _b, _n, _tail in [(3, 2, "last"), (1, 1, "segment"), (4, 4, "segment"), (9, 3, "segment"),
                      (3, 3, "last"), (3, 4, "segment"), (1, 1, "last")]:
    _cls = V if _b > _n or (_tail == "segment" and _b == _n) else None
    _shown = ("max_num_seqs", _n, _b, "tail" if _tail == "segment"
              else IfCap("tail_segment", "tail")) if _cls else ()
    _caps = ("static_metadata",) + (("tail_segment",) if _tail == "segment" else ())
    _conf = {"cp_size": 1, "max_num_seqs": _n, "tail": _tail}
    _add("R-ERR-13", Row(
        f"B{_b}-N{_n}-{_tail}", "pack",
        _pack(seqs=[np.arange(4, dtype=np.int64) + 1000 * i for i in range(_b)], **_conf),
        _cls, _shown, needs=_caps, cites=("R-STATIC-1",)))
    for _counts in ([4] * _b, [2**30] + [1] * (_b - 1)):
        _add("R-ERR-13", Row(
            f"plan-B{_b}-N{_n}-{_tail}-{_counts[0]}", "plan",
            (lambda s, c: lambda base: {"seqlens": s, "config": {**base, **c}})(_counts, _conf),
            _cls, _shown, needs=("plan", *_caps)))

# max_num_seqs = INT32_MAX is valid: a call with one other fault reports that fault.
for _name, _api, _make in [
        ("cp_rank", "pack", _pack(max_num_seqs=INT32_MAX, cp_rank="cp")),
        ("negative_length", "plan", lambda base: {"seqlens": [5, -1],
                                                  "config": {**base, "max_num_seqs": INT32_MAX}}),
        ("empty_batch", "plan", lambda base: {"seqlens": [],
                                              "config": {**base, "max_num_seqs": INT32_MAX}})]:
    _add("R-ERR-12", Row(
        f"max_num_seqs-int32max-{_name}", _api, _make, V,
        ("cp_rank",) if _api == "pack" else ("seqlens",),
        needs=("static_metadata", "config_checks",
               "parallel_state_checks" if _api == "pack" else "plan"),
        also=("R-IN-3",), cites=("R-ERR-5", "R-ERR-6", "R-ERR-7"),
        rows=INT32_MAX))

# Sizes as np.int64 whose products pass 2**63: rejected as the same Python ints (R-ERR-8),
# never wrapped into a small alignment or total.
_WRAPPING: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
        ("tp2^62-cp2", {"tp_size": 2**62, "cp_size": 2}, ("tensor_parallel",)),
        ("tp-int64max-cp2", {"tp_size": 2**63 - 1, "cp_size": 2}, ("tensor_parallel",)),
        ("tp2^40-cp2^40", {"tp_size": 2**40, "cp_size": 2**40}, ("tensor_parallel",)),
        ("tp2^62-cp4-contiguous", {"tp_size": 2**62, "cp_size": 4, "cp_layout": "contiguous"},
         ("tensor_parallel", "contiguous"))]
for _name, _wrapping, _caps in _WRAPPING:
    _add("R-ERR-8", Row(
        f"numpy-tp-{_name}", "plan",
        (lambda c: lambda base: {"seqlens": [5, 3],
                                 "config": {**c, "tp_size": np.int64(c["tp_size"])}})(
            _wrapping),
        V, needs=("plan", *_caps), also=("R-TOTAL-6",)))


def rows() -> list[tuple[str, Row]]:
    """Every row with the rule it is filed under, in table order (both modules)."""
    from . import rejection_forms  # noqa: F401  (its rows join TABLE on import)

    return [(rule, row) for rule, table_rows in TABLE.items() for row in table_rows]
