"""Bad input (spec section 11): the target raises the reference's error class, before touching
data, and leaves its inputs unchanged. Valid look-alikes (NumPy integers, np.float64 pad
values) are mixed in: where the reference accepts, the target must accept too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import reference

from . import harness as h
from .strategies import (
    CONFIG_FEATURES,
    INT32_MAX,
    UNPACK_FAULTS,
    bad_batches,
    bad_buckets,
    bad_flags,
    bad_layouts,
    bad_lengths,
    bad_min_local_rows,
    bad_pad_values,
    bad_ranks,
    bad_sizes,
    rows_bound,
)

BASE_CONFIG: dict[str, Any] = {"tp_size": 1, "cp_size": 2, "cp_layout": "zigzag", "fp8": False,
                               "bucket": None, "min_local_rows": None}


def _batch(dtype: str = "int64") -> list[np.ndarray]:
    return [np.arange(5).astype(dtype), np.arange(3).astype(dtype)]


def _length_rows(seqlens: Any) -> int:
    """The rows a packer without length checks would build for `seqlens` (their integer sum,
    0 for anything that is not a sequence of integers), to respect a target's `max_rows`."""
    try:
        return sum(max(int(n), 0) for n in seqlens if not isinstance(n, bool | float | str))
    except (TypeError, ValueError):
        return 0


def _compare_pack(seqs: Any, config: dict[str, Any], cp_rank: Any = 0, need_roll: Any = False,
                  pad_value: Any = 0, rules: Any = None, field: str | None = None) -> None:
    """Same outcome class as the reference; inputs unchanged; same rows where both accept."""
    what = f"pack(config={config}, cp_rank={cp_rank!r}, need_roll={need_roll!r}, " \
        f"pad_value={pad_value!r})"
    want_holder: list[Any] = []

    def ref() -> None:
        want_holder.append(reference.pack_thd(seqs, reference.PackConfig(**config), cp_rank,
                                              need_roll=need_roll, pad_value=pad_value))

    want = h.outcome(ref)
    before = h.snapshot(seqs)
    got_holder: list[Any] = []
    got = h.outcome(lambda: got_holder.append(
        h.target().pack(seqs, dict(config), cp_rank, need_roll=need_roll, pad_value=pad_value)))
    if h.snapshot(seqs) != before:
        raise h.RuleViolation(f"{what}: the call changed its input arrays", {"R-ERR-1"})
    names: tuple[str, ...] = (field,) if field else ()
    if field == "bucket":
        names = ("bucket", "pad_to_length_bucket")
    h.check_same_rejection(want, got, what, rules(want) if callable(rules) else rules, names)
    if want is None and got is None:
        rows, ref_rows = np.asarray(got_holder[0][0]), want_holder[0][0]
        if not h.same_value(rows, ref_rows):
            raise h.RuleViolation(f"{what}: accepted, but rows {rows.tolist()} differ from the "
                                  f"spec's {ref_rows.tolist()}", {"R-TOTAL-4", "R-ROW-1"})


@h.needs("parallel_state_checks")
@pytest.mark.rules("R-IN-3", "R-ERR-1", "R-ERR-2")
@h.prop_settings(0.5)
@given(st.sampled_from(["tp_size", "cp_size"]), bad_sizes)
def test_reject_parallel_sizes(field: str, value: Any) -> None:
    """tp_size / cp_size: non-integers (bool, float, str) TypeError, < 1 ValueError."""
    _compare_pack(_batch(), {**BASE_CONFIG, field: value}, rules=_by_class("R-ERR-2"),
                  field=field)


def _by_class(value_rule: str, type_rule: str = "R-ERR-1") -> Any:
    """The rule a mismatch disproves, from the error class the spec expects."""
    def pick(want: BaseException | None) -> set[str]:
        if isinstance(want, TypeError):
            return {type_rule}
        return {value_rule}
    return pick


FIELD_RULES = {"bucket": ("R-ERR-3", "R-ERR-3"), "min_local_rows": ("R-ERR-2", "R-ERR-1"),
               "cp_layout": ("R-ERR-4", "R-ERR-1"), "fp8": ("R-ERR-1", "R-ERR-1")}


FIELD_VALUES = {"bucket": bad_buckets, "min_local_rows": bad_min_local_rows,
                "cp_layout": bad_layouts, "fp8": bad_flags}


@pytest.mark.rules("R-IN-3", "R-ERR-1", "R-ERR-2", "R-ERR-3", "R-ERR-4")
@pytest.mark.parametrize("field", [
    pytest.param(f, marks=h.needs(f)) if f in CONFIG_FEATURES else f for f in sorted(FIELD_VALUES)
])
@h.prop_settings(0.5)
@given(data=st.data())
def test_reject_config_flags(field: str, data: st.DataObject) -> None:
    """User-facing config fields, one test per field so each gets its own minimal example:
    bucket (bool/float/str TypeError, < 1 ValueError, erratum E-7), min_local_rows, cp_layout,
    fp8. A field whose feature the target declines (bucket, fp8, min_local_rows) is declined."""
    value = data.draw(FIELD_VALUES[field], label=field)
    _compare_pack(_batch(), {**BASE_CONFIG, field: value}, rules=_by_class(*FIELD_RULES[field]),
                  field=field)


@h.needs("parallel_state_checks")
@pytest.mark.rules("R-IN-4", "R-ERR-1", "R-ERR-5")
@h.prop_settings(0.5)
@given(bad_ranks)
def test_reject_cp_rank(value: Any) -> None:
    """cp_rank: a non-integer TypeError, outside [0, cp_size) ValueError."""
    cp = BASE_CONFIG["cp_size"]
    rank = {"neg": -1, "cp": cp, "cp+3": cp + 3}.get(value, value) if isinstance(value, str) \
        else value
    _compare_pack(_batch(), BASE_CONFIG, cp_rank=rank, rules=_by_class("R-ERR-5"),
                  field="cp_rank")


@h.needs("need_roll")
@pytest.mark.rules("R-IN-4", "R-ERR-1")
@h.prop_settings(0.5)
@given(bad_flags)
def test_reject_need_roll(value: Any) -> None:
    """need_roll must be a real bool."""
    _compare_pack(_batch(), BASE_CONFIG, need_roll=value, rules={"R-ERR-1"}, field="need_roll")


PAD_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64", "complex64"]


@h.needs("pad_value")
@pytest.mark.rules("R-IN-4", "R-IN-5", "R-ERR-1", "R-ERR-10")
@h.prop_settings()
@given(st.sampled_from(PAD_DTYPES).flatmap(lambda d: st.tuples(st.just(d), bad_pad_values(d))))
def test_reject_pad_value(dtype_value: tuple[str, Any]) -> None:
    """pad_value: not a bool/int/float TypeError; not representable in the dtype ValueError."""
    dtype, value = dtype_value
    _compare_pack(_batch(dtype), BASE_CONFIG, pad_value=value, rules=_by_class("R-ERR-10"),
                  field="pad_value")


def _bad_batch(kind: str) -> Any:
    good = _batch()
    return {
        "not-a-list": {0: good[0]},
        "empty": [],
        "list-element": [good[0], [1, 2, 3]],
        "scalar-element": [good[0], 3],
        "none-element": [None],
        "zero-dim": [np.array(5)],
        "trail-mismatch": [np.zeros((2, 3)), np.zeros((2, 4))],
        "dtype-mismatch": [np.zeros(2, np.int64), np.zeros(2, np.int32)],
        "tuple-ok": tuple(good),
        "ndarray-batch": np.zeros((2, 3)),
    }[kind]


@h.needs("batch_checks")
@pytest.mark.rules("R-IN-1", "R-ERR-1", "R-ERR-7", "R-ERR-9")
@h.prop_settings(0.5)
@given(bad_batches)
def test_reject_batch(kind: str) -> None:
    """Batch structure: not a list/tuple or a foreign element TypeError, empty ValueError,
    0-d or mixed trailing shapes ValueError, mixed dtypes TypeError."""
    _compare_pack(_bad_batch(kind), BASE_CONFIG)


@h.needs("plan")
@pytest.mark.rules("R-ERR-1", "R-ERR-6", "R-ERR-8")
@h.prop_settings(0.5)
@given(st.lists(st.just(4), min_size=0, max_size=3), bad_lengths, st.integers(0, 3))
def test_reject_lengths(good: list[int], bad: Any, where: int) -> None:
    """Lengths (capability `plan`): negative ValueError, above INT32_MAX ValueError, a
    non-integer TypeError; an empty list ValueError."""
    seqlens = good[:where] + [bad] + good[where:]
    assume(h.within_rows(_length_rows(seqlens)))
    want = h.outcome(lambda: reference.plan_thd(seqlens, reference.PackConfig()))
    got = h.outcome(lambda: h.target().plan(seqlens, {}))
    h.check_same_rejection(want, got, f"plan({seqlens!r})")
    empty_want = h.outcome(lambda: reference.plan_thd([], reference.PackConfig()))
    h.check_same_rejection(empty_want, h.outcome(lambda: h.target().plan([], {})), "plan([])")


@pytest.mark.rules("R-ERR-8", "R-TOTAL-6")
@pytest.mark.parametrize("config", [
    pytest.param({"bucket": 2**31}, marks=h.needs("bucket"), id="bucket-2^31"),
    pytest.param({"min_local_rows": 2**31}, marks=h.needs("min_local_rows"),
                 id="min_local_rows-2^31"),
    pytest.param({"cp_size": 2, "bucket": INT32_MAX}, marks=h.needs("bucket"),
                 id="cp2-bucket-int32max"),
    pytest.param({"cp_size": 4, "tp_size": 2, "bucket": 2**30 + 1}, marks=h.needs("bucket"),
                 id="cp4-tp2-bucket-2^30+1"),
])
def test_reject_total_above_int32(config: dict[str, Any]) -> None:
    """A total above INT32_MAX is rejected with ValueError before any allocation (erratum E-8:
    int32 metadata would wrap). Not run on a target whose `max_rows` is below that total: a
    packer without the check would build it."""
    h.require_rows(rows_bound([3], {**BASE_CONFIG, "cp_size": 1, **config}), "this total")
    _compare_pack([np.arange(3, dtype=np.int8)], {**BASE_CONFIG, "cp_size": 1, **config},
                  rules={"R-ERR-8", "R-TOTAL-6"})


def _bad_unpack(kind: str) -> tuple[list[np.ndarray], dict[str, Any], dict[str, Any]]:
    config = dict(BASE_CONFIG)
    plan = reference.plan_thd([5, 3], reference.PackConfig(**config))
    meta = {k: getattr(plan, k) for k in h.META_ARRAYS + h.META_INTS}
    shards = [np.zeros((plan.local_rows, 11), np.int64) for _ in range(2)]
    if kind == "too-few-shards":
        shards = shards[:1]
    elif kind == "too-many-shards":
        shards = shards + [shards[0].copy()]
    elif kind == "short-shard":
        shards[1] = shards[1][:-1]
    elif kind == "long-shard":
        shards[0] = np.zeros((plan.local_rows + 2, 11), np.int64)
    elif kind == "trail-mismatch":
        shards[1] = np.zeros((plan.local_rows, 13), np.int64)
    elif kind == "dtype-mismatch":
        shards[1] = shards[1].astype(np.int32)
    elif kind == "total-mismatch":
        meta["total"] = plan.total + 4
    elif kind == "shards-stacked":  # one array [cp, local_rows, ...] instead of a list
        shards = np.stack(shards)  # type: ignore[assignment]
    elif kind == "shards-none":
        shards = None  # type: ignore[assignment]
    elif kind == "shards-dict":
        shards = dict(enumerate(shards))  # type: ignore[assignment]
    elif kind == "element-list":
        shards[1] = shards[1].tolist()  # type: ignore[call-overload]
    elif kind == "element-none":
        shards[0] = None  # type: ignore[call-overload]
    return shards, meta, config


# The offending value each fault's message must show (spec section 11: the message names the
# field and the value): the object of the wrong type, or both trailing shapes that differ.
UNPACK_VALUES = {"shards-stacked": "object", "shards-dict": "object", "element-list": 1,
                 "element-none": 0, "trail-mismatch": (11, 13)}


@h.needs("unpack", "unpack_checks")
@pytest.mark.rules("R-ERR-11")
@pytest.mark.parametrize("kind", UNPACK_FAULTS)
def test_reject_unpack(kind: str) -> None:
    """unpack: wrong shard count, row count, trailing shape, dtype, a total that is not
    local_rows * cp_size, or shards that are not a list or hold a non-array (TypeError naming
    shards and the type it got); a trailing-shape mismatch reports both shapes."""
    shards, meta, config = _bad_unpack(kind)
    ref_plan = reference.Plan(**{k: (np.asarray(v, np.int32) if k in h.META_ARRAYS else v)
                                 for k, v in meta.items()})  # type: ignore[arg-type]
    want = h.outcome(lambda: reference.unpack_thd(shards, ref_plan,
                                                  reference.PackConfig(**config)))
    before = h.snapshot(shards)
    got = h.outcome(lambda: h.target().unpack(shards, meta, dict(config)))
    assert h.snapshot(shards) == before, "unpack changed its input shards"
    h.check_same_rejection(want, got, f"unpack({kind})")
    value = UNPACK_VALUES.get(kind)
    message = str(got)
    if value == "object" and not h.names_object(shards, message):
        raise h.RuleViolation(f"unpack({kind}): the message {message!r} does not name the "
                              f"{type(shards).__name__} it got", {"R-ERR-1"})
    if isinstance(value, int) and not h.names_object(shards[value], message):
        raise h.RuleViolation(f"unpack({kind}): the message {message!r} does not name the "
                              f"{type(shards[value]).__name__} element", {"R-ERR-1"})
    if isinstance(value, tuple) and not all(h.names_number(n, message) for n in value):
        raise h.RuleViolation(f"unpack({kind}): the message {message!r} does not report both "
                              f"trailing shapes {value}", {"R-ERR-11"})


FORGERIES = ("seqlen-above-padded", "negative-seqlen", "padded-not-cu-steps", "cu-not-from-0",
             "short-padded", "short-cu", "zigzag-misaligned")


def _forge(kind: str, seqlens: list[int], config: dict[str, Any], which: int) -> dict[str, Any]:
    """A plan whose arrays contradict each other, but with total == local_rows * cp_size, so
    only the optional consistency checks of R-ERR-11 can reject it."""
    cfg = reference.PackConfig(**config)
    plan = reference.plan_thd(seqlens, cfg)
    lengths = np.array(plan.seqlens, np.int64)
    padded = np.array(plan.seqlens_padded, np.int64)
    i = which % len(seqlens)
    if kind == "seqlen-above-padded":
        lengths[i] = padded[i] + 1
    elif kind == "negative-seqlen":
        lengths[i] = -1
    elif kind == "padded-not-cu-steps":
        padded[i] += cfg.seq_align  # cu_seqlens_padded and total keep the true steps
    elif kind == "short-padded":
        padded = padded[:-1]
    elif kind == "zigzag-misaligned":
        padded[i] += cfg.cp_size  # a multiple of cp, not of 2 * cp: no zigzag chunks
    cu = np.concatenate([[0], np.cumsum(np.array(plan.seqlens_padded, np.int64))])
    if kind in ("zigzag-misaligned", "short-padded"):
        cu = np.concatenate([[0], np.cumsum(padded)])
    if kind == "cu-not-from-0":
        cu = cu + cfg.cp_size
    if kind == "short-cu":
        cu = cu[:-1]
    total = int(cu[-1])
    meta: dict[str, Any] = {
        "seqlens": lengths.astype(np.int32), "seqlens_padded": padded.astype(np.int32),
        "cu_seqlens": np.asarray(plan.cu_seqlens, np.int32),
        "cu_seqlens_padded": cu.astype(np.int32), "max_seqlen": plan.max_seqlen,
        "total": total, "local_rows": total // cfg.cp_size}
    assert meta["local_rows"] * cfg.cp_size == total
    return meta


@h.needs("unpack", "forged_plan_checks")
@pytest.mark.rules("R-ERR-11")
@pytest.mark.parametrize("kind", FORGERIES)
@h.prop_settings(0.1)
@given(seqlens=st.lists(st.integers(0, 20), min_size=1, max_size=4), cp=st.integers(1, 4),
       layout=st.sampled_from(["zigzag", "contiguous"]), which=st.integers(0, 3))
def test_reject_forged_plan(kind: str, seqlens: list[int], cp: int, layout: str,
                            which: int) -> None:
    """A forged plan (capability `forged_plan_checks`: the MAY of R-ERR-11): unpack raises
    ValueError naming the plan, instead of reading out of range or returning wrong sequences;
    the shards are left unchanged."""
    if kind == "zigzag-misaligned" and (cp == 1 or layout != "zigzag"):
        layout, cp = "zigzag", 2  # only zigzag chunks need P_i divisible by 2 * cp
    config = {**BASE_CONFIG, "cp_size": cp, "cp_layout": layout}
    meta = _forge(kind, seqlens, config, which)
    shards = [np.arange(meta["local_rows"] * 2, dtype=np.int64).reshape(-1, 2) + 1000 * r
              for r in range(cp)]
    before = h.snapshot(shards)
    got = h.outcome(lambda: h.target().unpack(shards, meta, dict(config)))
    assert h.snapshot(shards) == before, "unpack changed its input shards"
    what = f"unpack with a forged plan ({kind}: {meta})"
    if not isinstance(got, ValueError):
        raise h.RuleViolation(f"{what}: expected ValueError, got {got!r}", {"R-ERR-11"})
    fields = ("plan", "seqlens", "seqlens_padded", "cu_seqlens_padded", "total", "local_rows")
    if not any(h._names(n, str(got)) for n in fields):
        raise h.RuleViolation(f"{what}: the message {str(got)!r} names no plan field",
                              {"R-ERR-11"})


@h.needs("plan")
@pytest.mark.rules("R-ERR-1", "R-ERR-6", "R-ERR-8", "R-TOTAL-6")
@pytest.mark.parametrize("seqlens", [
    [2**63], [-(2**63) - 1], [4, 2**64], [-(2**63), 2**64], "44", None, {4},
    np.array([[4, 4]]), np.array([True, False]), np.array([4.0]), np.array([], np.int64),
    np.array([200, 100], np.uint8), np.array([40000, 40000], np.uint16),
    np.array([2**30, 2**30], np.int32), np.array([2**31 - 9, 8], np.int32),
], ids=["2^63", "-2^63-1", "2^64", "-2^63,2^64", "str", "None", "set", "2-D", "bool-array",
        "float-array", "empty-array", "uint8-sum-300", "uint16-sum-80000", "int32-sum-2^31",
        "int32-sum-int32max"])
def test_lengths_edges(seqlens: Any) -> None:
    """Lengths beyond int64, containers that are not a 1-D integer sequence (TypeError or
    ValueError naming seqlens), and narrow integer arrays whose sum does not fit their dtype
    (accepted with the reference's total, or rejected above INT32_MAX, never wrapped)."""
    h.require_rows(_length_rows(seqlens), f"plan({seqlens!r})")
    want = h.outcome(lambda: reference.plan_thd(seqlens, reference.PackConfig()))
    got = h.outcome(lambda: h.target().plan(seqlens, {}))
    h.check_same_rejection(want, got, f"plan({seqlens!r})", names=("seqlens",))
    if want is None:
        problems = h.meta_mismatches(h.target().plan(seqlens, {}),
                                     reference.plan_thd(seqlens, reference.PackConfig()))
        assert not problems, "; ".join(problems)


# Flat values [rows, *trail] with lengths= (capability `flat_batch_checks`): (lengths, rows,
# trail). The reference has no flat form; where plan_thd rejects the lengths alone, its error
# class is the expected one, and lengths that do not sum to the rows are a ValueError (a shape
# that contradicts the lengths, as R-ERR-9's mismatched shapes).
FLAT_FAULTS: dict[str, tuple[Any, int, tuple[int, ...]]] = {
    "sum-short": ([3, 4], 8, ()),
    "sum-long": ([3, 9], 8, ()),
    "sum-short-trail": ([3, 4], 8, (3,)),
    "sum-long-trail": ([5, 6], 8, (2, 2)),
    "sum-tensor": (np.array([3, 4], np.int64), 8, (3,)),
    "negative": ([9, -1], 8, ()),
    "negative-tensor": (np.array([9, -1], np.int32), 8, (3,)),
    "float-list": ([4.0, 4], 8, ()),
    "float-tensor": (np.array([4.0, 4.0]), 8, ()),
    "bool-list": ([True] * 8, 8, ()),
    "bool-tensor": (np.ones(8, bool), 8, ()),
    "str": ("44", 8, ()),
    "2-D": (np.array([[4, 4]]), 8, ()),
    "empty-list": ([], 0, ()),
    "empty-tensor": (np.array([], np.int64), 0, (3,)),
    "above-int32": ([INT32_MAX + 1, -(INT32_MAX + 1) + 8], 8, ()),
}


def _flat_expected(lengths: Any, rows: int) -> tuple[type[BaseException], set[str]]:
    """The spec's error class for flat values with these lengths, and the rule it enforces."""
    want = h.outcome(lambda: reference.plan_thd(lengths, reference.PackConfig()))
    if isinstance(want, TypeError):
        return TypeError, {"R-ERR-1"}
    if want is not None:
        return type(want), {"R-ERR-6", "R-ERR-7", "R-ERR-8"}
    assert sum(int(n) for n in lengths) != rows, "not a fault"
    return ValueError, {"R-IN-1", "R-ERR-9"}


@h.needs("flat_batch_checks")
@pytest.mark.rules("R-IN-1", "R-ERR-1", "R-ERR-6", "R-ERR-7", "R-ERR-8", "R-ERR-9")
@pytest.mark.parametrize("kind", sorted(FLAT_FAULTS))
def test_reject_flat_lengths(kind: str) -> None:
    """Flat values with bad `lengths=`: not summing to the rows (with and without trailing
    dims), negative, non-integer or bool, 2-D, empty, above INT32_MAX. The spec's error class,
    a message naming `lengths` (as written: case matters) and, for a sum or a negative length,
    the offending number; values and lengths unchanged."""
    lengths, rows, trail = FLAT_FAULTS[kind]
    values = np.arange(rows * int(np.prod(trail)), dtype=np.int64).reshape(rows, *trail)
    expected, rules = _flat_expected(lengths, rows)
    before = h.snapshot([values, lengths])
    got = h.outcome(lambda: h.target().pack_flat(values, lengths, dict(BASE_CONFIG), 0))
    what = f"pack_flat(values {values.shape}, lengths={lengths!r})"
    if h.snapshot([values, lengths]) != before:
        raise h.RuleViolation(f"{what}: the call changed its inputs", {"R-ERR-1"})
    if not isinstance(got, expected):
        raise h.RuleViolation(f"{what}: expected {expected.__name__}, got {got!r}", rules)
    message = str(got)
    if not h._names("lengths", message):
        raise h.RuleViolation(f"{what}: the message {message!r} does not name 'lengths'", rules)
    if kind.startswith("sum") and not h.names_number(rows, message):
        raise h.RuleViolation(f"{what}: the message {message!r} does not report the {rows} "
                              "rows the lengths contradict (spec section 11: the value)", rules)
    if kind == "str" and not h._names("str", message):
        raise h.RuleViolation(f"{what}: the message {message!r} does not name the type it got "
                              "(str)", rules)
    if kind.startswith("negative") and not h.names_number(-1, message):
        raise h.RuleViolation(f"{what}: the message {message!r} does not name the length -1",
                              rules)


@h.needs("flat_batch_checks")
@pytest.mark.rules("R-IN-1", "R-ROW-1")
def test_flat_lengths_accepted() -> None:
    """The look-alikes of the faults above are accepted: lengths as a list, as an int32 array,
    with NumPy integers and a zero length, each giving the reference's rows for the split batch
    (so the rejections above are not a target that rejects every flat batch)."""
    values = np.arange(24, dtype=np.int64).reshape(8, 3)
    seqs = [values[:3], values[3:3], values[3:]]
    want, _, _ = reference.pack_thd(seqs, reference.PackConfig(**BASE_CONFIG), 1)
    for lengths in ([3, 0, 5], np.array([3, 0, 5], np.int32), [np.int64(3), 0, np.int16(5)]):
        rows, _, _ = h.target().pack_flat(values, lengths, dict(BASE_CONFIG), 1)
        assert h.same_value(np.asarray(rows), want), f"lengths={lengths!r}: rows differ"


FOREIGN: dict[str, Any] = {"dict": lambda meta, config: (dict(meta), dict(config)),
           "str": lambda meta, config: ("plan", "config"),
           "tuple": lambda meta, config: (tuple(meta.values()), tuple(config.values()))}


@h.needs("api_type_checks")
@pytest.mark.rules("R-ERR-1")
@pytest.mark.parametrize("field", ["plan", "config"])
@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_reject_foreign_plan_or_config(field: str, kind: str) -> None:
    """unpack_thd / pack_thd called with a plan or config that is not the implementation's
    Plan / PackConfig (capability `api_type_checks`): TypeError whose message names the field
    and the type it got, as the reference's does; shards and batch unchanged."""
    config = dict(BASE_CONFIG)
    seqs = _batch()
    ref_cfg = reference.PackConfig(**config)
    ref_rows = [reference.pack_thd(seqs, ref_cfg, r)[0] for r in range(2)]
    ref_plan = reference.plan_thd([5, 3], ref_cfg)
    meta = {k: getattr(ref_plan, k) for k in h.META_ARRAYS + h.META_INTS}
    bad_plan, bad_config = FOREIGN[kind](meta, config)
    bad: Any = bad_plan if field == "plan" else bad_config
    calls: dict[str, tuple[Any, Any]] = {
        "unpack": (lambda: reference.unpack_thd(ref_rows, bad if field == "plan" else ref_plan,
                                                bad if field == "config" else ref_cfg),
                   lambda: h.target().unpack_as_is(
                       ref_rows, meta, config, **{"plan" if field == "plan" else "config_obj":
                                                  bad})),
    }
    if field == "config":
        calls["pack"] = (lambda: reference.pack_thd(seqs, bad, 0),
                         lambda: h.target().pack_as_is(seqs, bad, 0))
    for api, (ref_call, target_call) in calls.items():
        want = h.outcome(ref_call)
        assert isinstance(want, TypeError), f"reference {api}: {want!r}"
        before = h.snapshot(ref_rows + seqs)
        got = h.outcome(target_call)
        assert h.snapshot(ref_rows + seqs) == before, f"{api} changed its inputs"
        what = f"{api} with a {type(bad).__name__} as {field}"
        h.check_same_rejection(want, got, what, {"R-ERR-1"}, (field,))
        if not h.names_object(bad, str(got)):
            raise h.RuleViolation(f"{what}: the message {str(got)!r} does not name what it got "
                                  f"({type(bad).__name__})", {"R-ERR-1"})


@h.needs("native_scalars")
@pytest.mark.rules("R-IN-3", "R-IN-4", "R-ERR-1")
@pytest.mark.parametrize("field", [
    "tp_size", "cp_size", pytest.param("bucket", marks=h.needs("bucket")),
    pytest.param("min_local_rows", marks=h.needs("min_local_rows")), "cp_rank"])
@pytest.mark.parametrize("value", [1, True, False, 1.0], ids=["1", "True", "False", "1.0"])
def test_native_scalars(field: str, value: bool | int | float) -> None:
    """The target's own 0-d array (capability `native_scalars`, e.g. `torch.tensor(True)`) as a
    size, bucket or cp_rank behaves as the Python scalar it holds: an int is accepted with the
    reference's rows; a bool or a float is not an integer (spec section 0) and raises TypeError."""
    native = h.target().native_scalar(value)
    config = dict(BASE_CONFIG)
    cp_rank: Any = 0
    if field == "cp_rank":
        cp_rank, rank_value = native, value
    else:
        config[field], rank_value = native, 0
    ref_config = {**config, **({} if field == "cp_rank" else {field: value})}
    want = h.outcome(lambda: reference.PackConfig(**ref_config)) or h.outcome(
        lambda: reference.pack_thd(_batch(), reference.PackConfig(**ref_config), rank_value))
    got_holder: list[Any] = []
    got = h.outcome(lambda: got_holder.append(h.target().pack(_batch(), config, cp_rank)))
    what = f"pack with {field}={native!r}"
    h.check_same_rejection(want, got, what, _by_class("R-ERR-2")(want), (field,))
    if want is None:
        ref_rows = reference.pack_thd(_batch(), reference.PackConfig(**ref_config),
                                      rank_value)[0]
        assert h.same_value(np.asarray(got_holder[0][0]), ref_rows), f"{what}: rows differ"


def _names_one_of(names: str, message: str) -> bool:
    """"a|b": the message names either (the batch parameter is `seqs`; messages may say
    "batch")."""
    return any(h._names(name, message) for name in names.split("|"))


# (batch, what its error message must show): spec section 11, "the error message names the
# field and the offending value".
BATCH_MESSAGES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "not-a-container": ({0: np.zeros(2)}, ("batch|seqs", "dict")),
    "empty": ([], ("batch|seqs",)),
    "zero-dim-element": ([np.array(5)], ("batch|seqs",)),
    "trail-mismatch": ([np.zeros((2, 11)), np.zeros((3, 13))], ("11", "13")),
    "trail-rank": ([np.zeros((2, 11)), np.zeros((3, 11, 1))], ("11", "1")),
    "dtype-mismatch": ([np.zeros(2, np.int64), np.zeros(2, np.int32)], ("int64", "int32")),
    "list-element": ([np.zeros(2), [1.0, 2.0]], ("list",)),
    "str-element": ([np.zeros(2), "ab"], ("str",)),
}


@h.needs("batch_checks")
@pytest.mark.rules("R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("kind", sorted(BATCH_MESSAGES))
def test_batch_error_names_values(kind: str) -> None:
    """A batch with mixed trailing shapes or dtypes, or an element that is not an array: the
    reference's error class, and a message that shows the offending values (both trailing shapes,
    both dtypes, the element's type), not just that something is wrong."""
    seqs, shown = BATCH_MESSAGES[kind]
    want = h.outcome(lambda: reference.pack_thd(seqs, reference.PackConfig(), 0))
    got = h.outcome(lambda: h.target().pack(seqs, {}, 0))
    rules = {"R-ERR-1"} if isinstance(want, TypeError) else {"R-ERR-9"}
    h.check_same_rejection(want, got, f"pack({kind})", rules)
    missing = [s for s in shown if not (h.names_number(int(s), str(got)) if s.isdigit()
                                        else _names_one_of(s, str(got)))]
    if missing:
        raise h.RuleViolation(f"pack({kind}): the message {str(got)!r} does not show {missing}",
                              rules)


# Flat values that are not one array [rows, *trail] (capability `flat_batch_checks`): a list of
# arrays with lengths= is TypeError naming lengths and the type; 0-d values are ValueError
# naming the batch (spec section 11: the field and the value).
FLAT_VALUES: dict[str, tuple[Any, Any, type[BaseException], tuple[str, ...]]] = {
    "list-with-lengths": ([np.zeros(2), np.zeros(3)], [2, 3], TypeError, ("lengths", "list")),
    "zero-dim-values": (np.array(5), [1], ValueError, ("batch|values",)),
}


@h.needs("flat_batch_checks")
@pytest.mark.rules("R-IN-1", "R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("kind", sorted(FLAT_VALUES))
def test_reject_flat_values(kind: str) -> None:
    """lengths= belongs to one flat array: with a list of arrays it is a TypeError (not an
    AttributeError from inside), with 0-d values a ValueError; both name what is wrong."""
    values, lengths, expected, shown = FLAT_VALUES[kind]
    got = h.outcome(lambda: h.target().pack_flat(values, lengths, dict(BASE_CONFIG), 0))
    rules = {"R-ERR-1"} if expected is TypeError else {"R-ERR-9"}
    if not isinstance(got, expected):
        raise h.RuleViolation(f"pack_flat({kind}): expected {expected.__name__}, got {got!r}",
                              rules)
    missing = [w for w in shown if not _names_one_of(w, str(got))]
    if missing:
        raise h.RuleViolation(f"pack_flat({kind}): the message {str(got)!r} does not name "
                              f"{missing}", rules)


@h.needs("plan")
@pytest.mark.rules("R-ERR-8")
@pytest.mark.parametrize("first", [7, 200])
def test_length_beyond_int64_is_named(first: int) -> None:
    """A length beyond int64 next to a valid one (capability `plan`): ValueError whose message
    shows that length, not its neighbour (spec section 11: the offending value)."""
    seqlens = [first, 2**64]
    h.require_rows(_length_rows(seqlens), f"plan({seqlens!r})")
    got = h.outcome(lambda: h.target().plan(seqlens, {}))
    if not isinstance(got, ValueError):
        raise h.RuleViolation(f"plan({seqlens}): expected ValueError, got {got!r}", {"R-ERR-8"})
    if not h.names_number(2**64, str(got)):
        raise h.RuleViolation(f"plan({seqlens}): the message {str(got)!r} does not show 2**64",
                              {"R-ERR-8"})


@h.needs("api_type_checks")
@pytest.mark.rules("R-ERR-1")
@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_plan_rejects_foreign_config(kind: str) -> None:
    """plan with a config that is not the implementation's type (capability
    `api_type_checks`): TypeError naming config and the type it got."""
    config = {"dict": {}, "str": "config", "tuple": ()}[kind]
    got = h.outcome(lambda: h.target().plan_as_is([3, 4], config))
    if not isinstance(got, TypeError):
        raise h.RuleViolation(f"plan with config={config!r}: expected TypeError, got {got!r}",
                              {"R-ERR-1"})
    if not h._names("config", str(got)) or type(config).__name__ not in str(got):
        raise h.RuleViolation(f"plan with config={config!r}: the message {str(got)!r} does not "
                              f"name config and {type(config).__name__}", {"R-ERR-1"})


@h.needs("pad_value")
@pytest.mark.rules("R-IN-5", "R-ROW-2")
@pytest.mark.parametrize("dtype,value", [("uint32", 2**31), ("uint32", 2**32 - 1),
                                         ("uint64", 2**63), ("uint16", 2**15)])
def test_pad_value_at_the_sign_bit(dtype: str, value: int) -> None:
    """An unsigned pad value at or above the sign bit of the same-width signed type is written
    exactly (capability `pad_value`): the rows equal the reference's."""
    seqs = [np.arange(3, dtype=dtype), np.arange(2, dtype=dtype)]
    want, _, _ = reference.pack_thd(seqs, reference.PackConfig(tp_size=4), 0, pad_value=value)
    got, _, _ = h.target().pack(seqs, {"tp_size": 4}, 0, pad_value=value)
    assert h.same_bits(np.asarray(got), want), f"{dtype} pad {value}: {got!r}, spec {want!r}"
