"""Bad input (spec section 11): the target raises the reference's error class, before touching
data, and leaves its inputs unchanged. Valid look-alikes (NumPy integers, np.float64 pad
values) are mixed in: where the reference accepts, the target must accept too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference

from . import harness as h
from .strategies import (
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
)

BASE_CONFIG: dict[str, Any] = {"tp_size": 1, "cp_size": 2, "cp_layout": "zigzag", "fp8": False,
                               "bucket": None, "min_local_rows": None}


def _batch(dtype: str = "int64") -> list[np.ndarray]:
    return [np.arange(5).astype(dtype), np.arange(3).astype(dtype)]


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


@pytest.mark.rules("R-IN-3", "R-ERR-1", "R-ERR-2")
@h.prop_settings(0.5)
@given(st.sampled_from(["tp_size", "cp_size"]), bad_sizes)
def test_reject_parallel_sizes(field: str, value: Any) -> None:
    """tp_size / cp_size: non-integers (bool, float, str) TypeError, < 1 ValueError."""
    h.require("parallel_state_checks")
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
@pytest.mark.parametrize("field", sorted(FIELD_VALUES))
@h.prop_settings(0.5)
@given(data=st.data())
def test_reject_config_flags(field: str, data: st.DataObject) -> None:
    """User-facing config fields, one test per field so each gets its own minimal example:
    bucket (bool/float/str TypeError, < 1 ValueError, erratum E-7), min_local_rows, cp_layout,
    fp8."""
    value = data.draw(FIELD_VALUES[field], label=field)
    _compare_pack(_batch(), {**BASE_CONFIG, field: value}, rules=_by_class(*FIELD_RULES[field]),
                  field=field)


@pytest.mark.rules("R-IN-4", "R-ERR-1", "R-ERR-5")
@h.prop_settings(0.5)
@given(bad_ranks)
def test_reject_cp_rank(value: Any) -> None:
    """cp_rank: a non-integer TypeError, outside [0, cp_size) ValueError."""
    h.require("parallel_state_checks")
    cp = BASE_CONFIG["cp_size"]
    rank = {"neg": -1, "cp": cp, "cp+3": cp + 3}.get(value, value) if isinstance(value, str) \
        else value
    _compare_pack(_batch(), BASE_CONFIG, cp_rank=rank, rules=_by_class("R-ERR-5"),
                  field="cp_rank")


@pytest.mark.rules("R-IN-4", "R-ERR-1")
@h.prop_settings(0.5)
@given(bad_flags)
def test_reject_need_roll(value: Any) -> None:
    """need_roll must be a real bool."""
    _compare_pack(_batch(), BASE_CONFIG, need_roll=value, rules={"R-ERR-1"}, field="need_roll")


PAD_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64", "complex64"]


@pytest.mark.rules("R-IN-4", "R-IN-5", "R-ERR-1", "R-ERR-10")
@h.prop_settings()
@given(st.sampled_from(PAD_DTYPES).flatmap(lambda d: st.tuples(st.just(d), bad_pad_values(d))))
def test_reject_pad_value(dtype_value: tuple[str, Any]) -> None:
    """pad_value: not a bool/int/float TypeError; not representable in the dtype ValueError."""
    h.require("pad_value")
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


@pytest.mark.rules("R-IN-1", "R-ERR-1", "R-ERR-7", "R-ERR-9")
@h.prop_settings(0.5)
@given(bad_batches)
def test_reject_batch(kind: str) -> None:
    """Batch structure: not a list/tuple or a foreign element TypeError, empty ValueError,
    0-d or mixed trailing shapes ValueError, mixed dtypes TypeError."""
    h.require("batch_checks")
    _compare_pack(_bad_batch(kind), BASE_CONFIG)


@pytest.mark.rules("R-ERR-1", "R-ERR-6", "R-ERR-8")
@h.prop_settings(0.5)
@given(st.lists(st.just(4), min_size=0, max_size=3), bad_lengths, st.integers(0, 3))
def test_reject_lengths(good: list[int], bad: Any, where: int) -> None:
    """Lengths (capability `plan`): negative ValueError, above INT32_MAX ValueError, a
    non-integer TypeError; an empty list ValueError."""
    h.require("plan")
    seqlens = good[:where] + [bad] + good[where:]
    want = h.outcome(lambda: reference.plan_thd(seqlens, reference.PackConfig()))
    got = h.outcome(lambda: h.target().plan(seqlens, {}))
    h.check_same_rejection(want, got, f"plan({seqlens!r})")
    empty_want = h.outcome(lambda: reference.plan_thd([], reference.PackConfig()))
    h.check_same_rejection(empty_want, h.outcome(lambda: h.target().plan([], {})), "plan([])")


@pytest.mark.rules("R-ERR-8", "R-TOTAL-6")
@pytest.mark.parametrize("config", [
    {"bucket": 2**31},
    {"min_local_rows": 2**31},
    {"cp_size": 2, "bucket": INT32_MAX},
    {"cp_size": 4, "tp_size": 2, "bucket": 2**30 + 1},
], ids=["bucket-2^31", "min_local_rows-2^31", "cp2-bucket-int32max", "cp4-tp2-bucket-2^30+1"])
def test_reject_total_above_int32(config: dict[str, Any]) -> None:
    """A total above INT32_MAX is rejected with ValueError before any allocation (erratum E-8:
    int32 metadata would wrap)."""
    _compare_pack([np.arange(3, dtype=np.int8)], {**BASE_CONFIG, "cp_size": 1, **config},
                  rules={"R-ERR-8", "R-TOTAL-6"})


def _bad_unpack(kind: str) -> tuple[list[np.ndarray], dict[str, Any], dict[str, Any]]:
    config = dict(BASE_CONFIG)
    plan = reference.plan_thd([5, 3], reference.PackConfig(**config))
    meta = {k: getattr(plan, k) for k in h.META_ARRAYS + h.META_INTS}
    shards = [np.zeros((plan.local_rows, 2), np.int64) for _ in range(2)]
    if kind == "too-few-shards":
        shards = shards[:1]
    elif kind == "too-many-shards":
        shards = shards + [shards[0].copy()]
    elif kind == "short-shard":
        shards[1] = shards[1][:-1]
    elif kind == "long-shard":
        shards[0] = np.zeros((plan.local_rows + 2, 2), np.int64)
    elif kind == "trail-mismatch":
        shards[1] = np.zeros((plan.local_rows, 3), np.int64)
    elif kind == "dtype-mismatch":
        shards[1] = shards[1].astype(np.int32)
    elif kind == "total-mismatch":
        meta["total"] = plan.total + 4
    elif kind == "shards-stacked":  # one array [cp, local_rows, ...] instead of a list
        shards = np.stack(shards)  # type: ignore[assignment]
    elif kind == "shards-none":
        shards = None  # type: ignore[assignment]
    return shards, meta, config


@pytest.mark.rules("R-ERR-11")
@pytest.mark.parametrize("kind", UNPACK_FAULTS)
def test_reject_unpack(kind: str) -> None:
    """unpack: wrong shard count, row count, trailing shape, dtype, a total that is not
    local_rows * cp_size, or shards that are not a list (TypeError naming shards)."""
    h.require("unpack", "unpack_checks")
    shards, meta, config = _bad_unpack(kind)
    ref_plan = reference.Plan(**{k: (np.asarray(v, np.int32) if k in h.META_ARRAYS else v)
                                 for k, v in meta.items()})  # type: ignore[arg-type]
    want = h.outcome(lambda: reference.unpack_thd(shards, ref_plan,
                                                  reference.PackConfig(**config)))
    before = h.snapshot(shards)
    got = h.outcome(lambda: h.target().unpack(shards, meta, dict(config)))
    assert h.snapshot(shards) == before, "unpack changed its input shards"
    h.check_same_rejection(want, got, f"unpack({kind})")


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
    h.require("unpack", "forged_plan_checks")
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
    h.require("plan")
    want = h.outcome(lambda: reference.plan_thd(seqlens, reference.PackConfig()))
    got = h.outcome(lambda: h.target().plan(seqlens, {}))
    h.check_same_rejection(want, got, f"plan({seqlens!r})", names=("seqlens",))
    if want is None:
        problems = h.meta_mismatches(h.target().plan(seqlens, {}),
                                     reference.plan_thd(seqlens, reference.PackConfig()))
        assert not problems, "; ".join(problems)
