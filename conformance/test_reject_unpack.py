"""Bad unpack input (R-ERR-11): wrong shards, and forged plans (capability
`forged_plan_checks`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference

from . import harness as h
from .protocol import plain_meta
from .rejection import BASE_CONFIG
from .strategies import (
    UNPACK_FAULTS,
)


def _bad_unpack(kind: str) -> tuple[list[np.ndarray], dict[str, Any], dict[str, Any]]:
    config = dict(BASE_CONFIG)
    plan = reference.plan_thd([5, 3], reference.PackConfig(**config))
    meta = plain_meta(plan)
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
        "seqlens": lengths.astype(np.int32), "seqlens_padded": padded.astype(np.int32),
        "cu_seqlens": np.asarray(plan.cu_seqlens, np.int32),
        "cu_seqlens_padded": cu.astype(np.int32), "max_seqlen": plan.max_seqlen,
        "total": total, "local_rows": total // cfg.cp_size}
    if kind == "num-seqs-past-entries":
        meta["num_seqs"] = len(seqlens) + 1
    elif kind == "real-row-past-num-seqs":
        meta["num_seqs"] = len(seqlens) - 1
    assert meta["local_rows"] * cfg.cp_size == total
    return meta


@h.needs("unpack", "forged_plan_checks")
@pytest.mark.rules("R-ERR-11", "R-META-7")
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
    fields = ("plan", "seqlens", "seqlens_padded", "cu_seqlens_padded", "total", "local_rows",
              "num_seqs")
    if not any(h._names(n, str(got)) for n in fields):
        raise h.RuleViolation(f"{what}: the message {str(got)!r} names no plan field",
                              {"R-ERR-11"})
