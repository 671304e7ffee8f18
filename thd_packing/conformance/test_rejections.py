"""Spec section 11: every row of the rejection table (rejections.py), keyed by rule ID.

A row passes when the target raises the row's class before touching data, its message names
what the row lists (and every field the reference's message names, where the reference has the
entry point), and the inputs are unchanged; a valid look-alike (class None) is accepted with
the reference's rows on every rank. A row whose feature or validation the target declines is
reported declined. Forged plans (the MAY of R-ERR-11) are drawn, not tabled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from thd_packing import reference

from .buffer import check_buffer
from .compare import (
    FIELD_NAMES,
    meta_mismatches,
    names_field,
    names_item,
    names_object,
    outcome,
    same_value,
)
from .protocol import plain_meta
from .rejection_forms import MEG_CONFIG
from .rejections import IfCap, Named, Row, base_config, rows, two_sequences
from .running import run_target
from .strategies import Batch, PackCase
from .under_test import (
    RuleViolation,
    caps,
    needs,
    prop_settings,
    require_rows,
    target,
    with_convention,
)

try:
    BASE = with_convention(base_config(caps()))  # the target's fixed convention, if any
except RuntimeError:  # imported outside a suite run (no target loaded)
    BASE = base_config(frozenset({"zigzag"}))


@dataclass
class Call:
    """One row's call: the target's and, where the reference has the entry point, the
    reference's; the inputs that must stay unchanged; the accepted result's reference rows."""

    target: Callable[[], Any]
    reference: Callable[[], Any] | None
    inputs: list[Any]
    want_rows: Callable[[int], np.ndarray] | None = None  # rank -> the reference's rows
    ranks: int = 1


def _plan_of(meta: dict[str, Any]) -> Any:
    fields: dict[str, Any] = {k: (np.asarray(v, np.int32) if isinstance(v, np.ndarray) else v)
                              for k, v in meta.items()}
    return reference.Plan(**fields)


def call(row: Row, base: dict[str, Any], target: Any) -> Call:
    """The call of `row` on `target` (the loaded adapter), with the base config."""
    a = row.args(base)
    api = row.api
    if api == "pack":
        cfg = lambda: reference.PackConfig(**a["config"])  # noqa: E731
        ref = lambda rank=a["cp_rank"]: reference.pack_thd(  # noqa: E731
            a["seqs"], cfg(), rank, need_roll=a["need_roll"], pad_value=a["pad_value"])
        return Call(lambda: target.pack(a["seqs"], dict(a["config"]), a["cp_rank"],
                                        need_roll=a["need_roll"], pad_value=a["pad_value"]),
                    ref, [a["seqs"]], lambda rank: ref()[0])
    if api == "native_pack":
        field, value, config = a["field"], a["value"], a["config"]
        native = target.native_scalar(value)
        given = dict(config) if field == "cp_rank" else {**config, field: native}
        rank: Any = native if field == "cp_rank" else 0
        plain = config if field == "cp_rank" else {**config, field: value}
        plain_rank = value if field == "cp_rank" else 0
        ref_call = lambda: reference.pack_thd(  # noqa: E731
            two_sequences(), reference.PackConfig(**plain), plain_rank)
        return Call(lambda: target.pack(two_sequences(), given, rank), ref_call, [],
                    lambda _: ref_call()[0])
    if api == "plan":
        return Call(lambda: target.plan(a["seqlens"], dict(a["config"])),
                    lambda: reference.plan_thd(a["seqlens"], reference.PackConfig(**a["config"])),
                    [a["seqlens"]])
    if api == "pack_masked":
        values, mask, config = a["values"], a["mask"], a["config"]

        def masked_rows(rank: int) -> np.ndarray:
            seqs = [values[i][mask[i]] for i in range(len(values))]
            return reference.pack_thd(seqs, reference.PackConfig(**config), rank)[0]
        return Call(lambda: target.pack_masked(values, mask, dict(config), 0),
                    lambda: reference.pack_masked(values, mask, reference.PackConfig(**config),
                                                  0),
                    [values, mask], masked_rows, int(config.get("cp_size", 1)))
    if api == "unpack":
        return Call(lambda: target.unpack(a["shards"], a["meta"], dict(a["config"])),
                    lambda: reference.unpack_thd(a["shards"], _plan_of(a["meta"]),
                                                 reference.PackConfig(**a["config"])),
                    [a["shards"]])
    if api == "unpack_as_is":
        bad, field = a["bad"], a["field"]
        kwargs = {"plan": bad} if field == "plan" else {"config_obj": bad}
        return Call(lambda: target.unpack_as_is(a["shards"], a["meta"], a["config"], **kwargs),
                    lambda: reference.unpack_thd(a["shards"], bad if field == "plan"
                                                 else a["plan"],
                                                 bad if field == "config" else a["cfg"]),
                    [a["shards"]])
    if api == "pack_as_is":
        seqs = two_sequences()
        return Call(lambda: target.pack_as_is(seqs, a["bad"], 0),
                    lambda: reference.pack_thd(seqs, a["bad"], 0), [seqs])
    if api == "plan_as_is":
        return Call(lambda: target.plan_as_is(a["seqlens"], a["config"]), None, [])
    if api == "packed_preprocess":
        return Call(lambda: target.packed_preprocess(a["values"], a["mask"], dict(MEG_CONFIG),
                                                     0), None, [a["values"], a["mask"]])
    if api == "packed_postprocess":
        extra = {k: a[k] for k in ("batch_size", "seq_len", "params") if k in a}
        return Call(lambda: target.packed_postprocess(a["output"], a["cu"], a["mask"],
                                                      dict(MEG_CONFIG), **extra), None,
                    [a["output"], a["mask"]])
    if api == "packed_gathered":
        return Call(lambda: target.packed_gathered(a["shards"], a["cu"], a["mask"],
                                                   dict(a["config"]), 0), None, [a["shards"]])
    raise ValueError(f"unknown api {api!r}")


def _snapshot(inputs: list[Any]) -> list[bytes]:
    flat: list[Any] = []
    for item in inputs:
        flat.extend(item if isinstance(item, list | tuple) else [item])
    return [np.asarray(x).tobytes() + str(np.asarray(x).shape).encode()
            if isinstance(x, np.ndarray) else repr(x).encode() for x in flat]


def named(item: Any, message: str) -> bool:
    """The message names `item`: a field ("a|b": either), a number, an object (`Named`)."""
    if isinstance(item, IfCap):
        return item.cap not in caps() or named(item.item, message)
    if isinstance(item, Named):
        return names_object(item.obj, message)
    return names_item(item, message)


def _params() -> list[Any]:
    return [pytest.param(rule, row, id=f"{rule}-{row.name}",
                         marks=[pytest.mark.rules(rule, *row.also, *row.cites),
                                *([needs(*row.needs)] if row.needs else [])])
            for rule, row in rows()]


@pytest.mark.parametrize(("rule", "row"), _params())
def test_rejection(rule: str, row: Row) -> None:
    """One row: the class, the message, the inputs unchanged; or, for a valid look-alike, the
    reference's rows."""
    if row.rows:
        require_rows(row.rows, row.name)
    rules = {rule, *row.also}
    c = call(row, BASE, target())
    before = _snapshot(c.inputs)
    result: list[Any] = []
    got = outcome(lambda: result.append(c.target()))
    what = f"{row.api}({row.name})"
    if _snapshot(c.inputs) != before:
        raise RuleViolation(f"{what}: the call changed its inputs", rules)
    if row.error is None:
        if got is not None:
            raise RuleViolation(f"{what}: a valid input, rejected: {got!r}", rules)
        _accepted(row, c, result[0], what, rules)
        return
    if not isinstance(got, row.error):
        raise RuleViolation(f"{what}: expected {row.error.__name__}, got {got!r}", rules)
    message = str(got)
    missing = [item for item in row.names if not named(item, message)]
    if c.reference is not None:  # every field the spec's own message names (FIELD_NAMES)
        want = outcome(c.reference)
        missing += [n for n in FIELD_NAMES if want is not None and names_field(n, str(want))
                    and not names_field(n, message) and n not in row.names]
    if missing:
        raise RuleViolation(f"{what}: the message {message!r} does not name {missing} "
                            "(spec section 11: the field and the value)", rules)


def _accepted(row: Row, c: Any, result: Any, what: str, rules: set[str]) -> None:
    if row.api == "plan":
        problems = meta_mismatches(result, c.reference())
        if problems:
            raise RuleViolation(f"{what}: accepted, but {'; '.join(problems)}", rules)
        return
    if c.want_rows is None:
        return
    for rank in range(c.ranks):
        got = result if rank == 0 else _other_rank(row, c, rank)
        rows_got, want = np.asarray(got[0]), c.want_rows(rank)
        if not same_value(rows_got, want):
            # A different row count is a different total; the same count with other values is
            # a row fault.
            rule = "R-TOTAL-4" if rows_got.shape[:1] != want.shape[:1] else "R-ROW-1"
            raise RuleViolation(f"{what}: accepted, but rank {rank}'s rows "
                                f"{rows_got.tolist()} differ from the spec's {want.tolist()}",
                                {rule} | (rules & {"R-IN-7", "R-ROW-1"}))


def _other_rank(row: Row, c: Any, rank: int) -> Any:
    """The same accepted call on another rank (the mask form packs every rank)."""
    a = row.args(BASE)
    return target().pack_masked(a["values"], a["mask"], dict(a["config"]), rank)


@needs("pad_value")
@pytest.mark.rules("R-IN-5", "R-ROW-2")
@pytest.mark.parametrize("dtype,value", [("uint32", 2**31), ("uint32", 2**32 - 1),
                                         ("uint64", 2**63), ("uint16", 2**15)])
def test_pad_value_at_the_sign_bit(dtype: str, value: int) -> None:
    """An unsigned pad value at or above the sign bit of the same-width signed type is written
    exactly (capability `pad_value`): every padding row of the target's own buffer (its
    `cu_seqlens_padded` read through TE's partition, under its own convention and total) holds
    the value, bit for bit."""
    seqs = [np.arange(3, dtype=dtype), np.arange(2, dtype=dtype)]
    # Padding rows from a feature the target has: tp 4, else a bucket of 8 (5 tokens, a total
    # of 8 or more under any convention).
    if "tensor_parallel" in caps():
        config: dict[str, Any] = {"tp_size": 4}
    elif "bucket" in caps():
        config = {"bucket": 8}
    else:
        pytest.skip("declined: tensor_parallel, bucket (no way to make padding rows)")
    config = with_convention(config)
    case = PackCase(config, Batch((3, 2), dtype=dtype), pad_value=value)
    got = run_target(case, seqs)
    slots = check_buffer(got, config).slots
    pad = np.full((), value, dtype=dtype)
    rows = 0
    for rank, out in enumerate(got):
        seg, off = slots[rank]
        padding = ~(off < np.array([3, 2, 0])[np.minimum(seg, 2)])
        rows += int(padding.sum())
        wrong = np.flatnonzero(padding & (np.asarray(out.rows) != pad))
        if wrong.size:
            k = int(wrong[0])
            raise RuleViolation(f"{dtype} pad {value}: rank {rank} padding row {k} holds "
                                f"{out.rows[k]!r}", {"R-IN-5", "R-ROW-2"})
    assert rows, f"config {config}: the target's buffer has no padding row"


# ----------------------------------------------------------------------------------------------
# Forged plans (R-ERR-11's MAY, capability forged_plan_checks): drawn lengths and layouts

FORGERIES = ("seqlen-above-padded", "negative-seqlen", "padded-not-cu-steps", "cu-not-from-0",
             "short-padded", "short-cu", "zigzag-misaligned",
             # num_seqs (R-META-7) against the arrays: more than their K entries, or fewer while
             # an entry past it holds real rows (only padding may follow B: R-TAIL-1, R-STATIC-1)
             "num-seqs-past-entries", "real-row-past-num-seqs")


def _forge(kind: str, seqlens: list[int], config: dict[str, Any], which: int) -> dict[str, Any]:
    """A plan whose arrays contradict each other, but with total == local_rows * cp_size, so
    only the optional consistency checks of R-ERR-11 can reject it."""
    cfg = reference.PackConfig(**config)
    if kind == "real-row-past-num-seqs":  # K >= 2 entries, the last one with real rows
        seqlens = [*seqlens, 1 + which]
    plan = reference.plan_thd(seqlens, cfg)
    lengths = np.array(plan.seqlens, np.int64)
    padded = np.array(plan.seqlens_padded, np.int64)
    i = which % len(seqlens)
    if kind == "seqlen-above-padded":
        lengths[i] = padded[i] + 1
    elif kind == "negative-seqlen":
        lengths[i] = -1
    elif kind == "padded-not-cu-steps":
        padded[i] += cfg.sequence_align  # cu_seqlens_padded and total keep the true steps
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
        **plain_meta(plan), "seqlens": lengths.astype(np.int32),
        "seqlens_padded": padded.astype(np.int32), "cu_seqlens_padded": cu.astype(np.int32),
        "total": total, "local_rows": total // cfg.cp_size}
    meta.pop("num_seqs", None)
    if kind == "num-seqs-past-entries":
        meta["num_seqs"] = len(seqlens) + 1
    elif kind == "real-row-past-num-seqs":
        meta["num_seqs"] = len(seqlens) - 1
    assert meta["local_rows"] * cfg.cp_size == total
    return meta


@needs("unpack", "forged_plan_checks")
@pytest.mark.rules("R-ERR-11", "R-META-7")
@pytest.mark.parametrize("kind", FORGERIES)
@prop_settings(0.1)
@given(seqlens=st.lists(st.integers(0, 20), min_size=1, max_size=4), cp=st.integers(1, 4),
       layout=st.sampled_from(["zigzag", "contiguous"]), which=st.integers(0, 3))
def test_reject_forged_plan(kind: str, seqlens: list[int], cp: int, layout: str,
                            which: int) -> None:
    """A forged plan: unpack raises ValueError naming a plan field, instead of reading out of
    range or returning wrong sequences; the shards are left unchanged."""
    if kind == "zigzag-misaligned" and (cp == 1 or layout != "zigzag"):
        layout, cp = "zigzag", 2  # only zigzag chunks need P_i divisible by 2 * cp
    config = {**BASE, "cp_size": cp, "cp_layout": layout}
    meta = _forge(kind, seqlens, config, which)
    shards = [np.arange(meta["local_rows"] * 2, dtype=np.int64).reshape(-1, 2) + 1000 * r
              for r in range(cp)]
    before = _snapshot([shards])
    got = outcome(lambda: target().unpack(shards, meta, dict(config)))
    assert _snapshot([shards]) == before, "unpack changed its input shards"
    what = f"unpack with a forged plan ({kind}: {meta})"
    if not isinstance(got, ValueError):
        raise RuleViolation(f"{what}: expected ValueError, got {got!r}", {"R-ERR-11"})
    fields = ("plan", "seqlens", "seqlens_padded", "cu_seqlens_padded", "total", "local_rows",
              "num_seqs")
    if not any(names_field(n, str(got)) for n in fields):
        raise RuleViolation(f"{what}: the message {str(got)!r} names no plan field",
                            {"R-ERR-11"})
