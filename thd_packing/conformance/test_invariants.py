"""Invariants of the spec checked on the target's output alone (no oracle).

Every token carries a unique code (sequence << 32 | offset, plus one), so the rows themselves
say where they came from: counting them proves "every real token exactly once" (R-SHARD-4).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from . import requirements as req
from .contract import segment_lengths
from .protocol import zero_length_of
from .running import call_target, readable_output
from .strategies import configs, fit_static, lengths
from .under_test import RuleViolation, assume_declared, caps, prop_settings, target

CAPS = caps()
PAD = -1 if "pad_value" in CAPS else 0  # token codes are >= 1, so the pad never collides


def _encoded(lens: tuple[int, ...]) -> list[np.ndarray]:
    return [(np.arange(n, dtype=np.int64) + (i << 32) + 1) for i, n in enumerate(lens)]


def _pack(seqs: list[np.ndarray], config: dict[str, Any], rank: int,
          lens: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """One rank's output, read through the protocol (TargetError where it cannot be read)."""
    rules = {"R-IN-1", "R-IN-3"} | ({"R-IN-2"} if 0 in lens else set())
    what = f"pack(rank {rank})"
    return readable_output(call_target(what, target().pack, seqs, dict(config), rank,
                                       pad_value=PAD, rules=rules), what)


def _pack_all(lens: tuple[int, ...], config: dict[str, Any]
              ) -> list[tuple[np.ndarray, np.ndarray, dict[str, Any]]]:
    seqs = _encoded(lens)
    return [_pack(seqs, config, r, lens) for r in range(config["cp_size"])]


def _total(meta: dict[str, Any]) -> int:
    """The reported total, or the end of the reported buffer where the target gives none."""
    return int(meta["total"]) if "total" in meta else int(np.asarray(meta["cu_seqlens_padded"])[-1])


cases = st.tuples(lengths(max_batch=24, budget=1500, caps=CAPS), configs(caps=CAPS)).map(
    lambda c: (c[0], fit_static(c[1], len(c[0]))))


@pytest.mark.rules("R-SHARD-4", "R-ROW-1", "R-ROW-2", "R-POS-2")
@prop_settings()
@example(((4, 0, 2), {"tp_size": 1, "cp_size": 2, "cp_layout": "zigzag", "fp8": False,
                      "bucket": None, "min_local_rows": None}))
@example(((3,), {"tp_size": 1, "cp_size": 2, "cp_layout": "zigzag", "fp8": False,
                 "bucket": 6, "min_local_rows": None}))  # erratum E-1: a token is lost
@given(cases)
def test_every_token_exactly_once(case: tuple[tuple[int, ...], dict[str, Any]]) -> None:
    """Over all ranks: each real token once, with its own offset as position id; everything
    else is padding (the ranks' rows are a permutation of the padded buffer)."""
    _every_token_once(case)


@pytest.mark.rules("R-SHARD-4", "R-ROW-1", "R-ROW-2", "R-POS-2")
@prop_settings(0.5)
@given(cases.filter(lambda c: sum(c[0]) > 1))
def test_every_token_exactly_once_nondegenerate(
        case: tuple[tuple[int, ...], dict[str, Any]]) -> None:
    """The same on batches of two rows or more: a target that crashes on an all-empty (or a
    one-row) batch still has these rules judged on the others."""
    _every_token_once(case)


def _every_token_once(case: tuple[tuple[int, ...], dict[str, Any]]) -> None:
    lens, config = case
    assume_declared(config=config, lengths=lens)
    results = _pack_all(lens, config)
    rows = np.concatenate([np.asarray(r[0]) for r in results])
    # Packed(position_ids=None) on any rank: no position ids to check (the tokens still are)
    pos = (None if any(r[1] is None for r in results)
           else np.concatenate([np.asarray(r[1]) for r in results]))
    total = _total(results[0][2])
    assert rows.shape[0] == total, f"ranks hold {rows.shape[0]} rows, total is {total}"
    real = rows != PAD
    codes = rows[real]
    expected = np.concatenate(_encoded(lens))
    uniq, counts = np.unique(codes, return_counts=True)
    def names(values: np.ndarray) -> list[tuple[int, int]]:
        return [(int(c - 1) >> 32, int(c - 1) & 0xFFFFFFFF) for c in values[:5]]

    dup = uniq[counts > 1]
    if dup.size:
        raise RuleViolation(f"tokens held twice (sequence, offset): {names(dup)}",
                            {"R-SHARD-4"})
    missing = np.setdiff1d(expected, uniq)
    if missing.size:
        raise RuleViolation(f"tokens lost (sequence, offset): {names(missing)}", {"R-SHARD-4"})
    extra = np.setdiff1d(uniq, expected)
    if extra.size:
        raise RuleViolation(f"rows that are neither a token nor pad_value: {extra[:5]}",
                            {"R-ROW-1", "R-ROW-2"})
    if rows.shape[0] - codes.size != total - sum(lens):
        raise RuleViolation("wrong number of padding rows", {"R-SHARD-4"})
    if pos is None:
        return
    offsets = (codes - 1) & 0xFFFFFFFF
    wrong = np.flatnonzero(pos[real] != offsets)
    if wrong.size:
        raise RuleViolation(f"position id {int(pos[real][wrong[0]])} on the token at offset "
                            f"{int(offsets[wrong[0]])}", {"R-POS-2"})


@pytest.mark.rules("R-ALIGN-3", "R-TOTAL-3", "R-TOTAL-4", "R-TOTAL-5", "R-META-3", "R-META-5")
@prop_settings()
@example(((513,), {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False,
                   "bucket": 512, "min_local_rows": None}))
@example(((1,), {"tp_size": 2, "cp_size": 1, "cp_layout": "zigzag", "fp8": False,
                 "bucket": 3, "min_local_rows": None}))
@example(((1,), {"tp_size": 1, "cp_size": 2, "cp_layout": "zigzag", "fp8": False,
                 "bucket": None, "min_local_rows": 3}))
@example(((3, 0), {"tp_size": 2, "cp_size": 2, "cp_layout": "zigzag", "fp8": "mxfp8",
                   "bucket": None, "min_local_rows": None, "tail": "segment",
                   "seq_align": "cp", "max_num_seqs": 4, "max_seqlen": "total"}))
@given(cases)
def test_alignment_and_smallest_total(case: tuple[tuple[int, ...], dict[str, Any]]) -> None:
    """Every P_i a multiple of A and at least L_i; the surplus T - S on the last sequence
    (tail='last'), in its own segment B (tail='segment') or one segment per row ('tokens'),
    entries past the real content
    zero-length (max_num_seqs); the total a multiple of M, at least N and the smallest such;
    local rows split by tp. The formulas are the spec's (requirements.py), per convention."""
    lens, config = case
    assume_declared(config=config, lengths=lens)
    rows, _, meta = _pack(_encoded(lens), config, 0, lens)
    # The entries stand for the non-empty sequences where the target declares zero-length
    # omitted (R-META-8: B' for B); an empty sequence adds nothing to S or the total.
    lens = tuple(segment_lengths(lens, zero_length_of(target())))
    a, m = req.sequence_align(config), req.total_modulus(config)
    cu = np.asarray(meta["cu_seqlens_padded"], dtype=np.int64)
    padded = np.asarray(meta.get("seqlens_padded", np.diff(cu)), dtype=np.int64)
    total = _total(meta)
    local = int(meta["local_rows"]) if "local_rows" in meta else int(rows.shape[0])

    def check(ok: bool, message: str, *rules: str) -> None:
        if not ok:
            raise RuleViolation(message, set(rules))

    b = len(lens)
    tokens = config.get("tail", "last") == "tokens"  # R-TAIL-3: T - S one-row segments
    segment = config.get("tail", "last") == "segment" or tokens
    s = req.padded_sum(lens, config)
    mns = config.get("max_num_seqs")
    k = mns if mns is not None else b + (
        total - s if tokens else 1 if segment and total > s else 0)
    # The number of entries first: a plan with B + 1 segments is a verdict, not a crash.
    count_rules = (("R-STATIC-1",) if mns is not None else ("R-TAIL-3",) if tokens
                   else ("R-TAIL-1",) if segment else ())
    check(padded.shape == (k,), f"seqlens_padded has {padded.shape[0] if padded.ndim else 0} "
          f"entries for B = {b}, spec K = {k}: {padded.tolist()}", *(count_rules or ("R-META-1",)))
    check(cu.shape == (k + 1,), f"cu_seqlens_padded has {cu.shape[0] if cu.ndim else 0} "
          f"entries for K = {k}: {cu.tolist()}", *(count_rules or ("R-META-3",)))
    last = b if segment else b - 1  # the entry that takes the surplus T - S
    for i, (n, p) in enumerate(zip(lens, padded[:b], strict=True)):
        if i == last:
            rule = "R-TOTAL-5"
        elif p % req.sequence_base(config) == 0 and p % a != 0:
            rule = "R-ALIGN-2"  # FP8's lcm(16, As) missed, the base alignment kept
        else:
            rule = "R-ALIGN-3"
        check(p % a == 0, f"P_{i} = {p} is not a multiple of A = {a}", rule)
        check(p >= n, f"P_{i} = {p} < L_{i} = {n}", rule)
        if i != last:
            check(p == req.ceil_to(n, a), f"P_{i} = {p}, ceil_to(L_{i}, A) = "
                  f"{req.ceil_to(n, a)}", "R-ALIGN-3", "R-TAIL-1" if segment else "R-TOTAL-5")
    if tokens:
        check(bool((padded[b:] == 1).all()), f"padding segments {padded[b:].tolist()[:8]} are "
              "not one row each", "R-TAIL-3")
    elif segment and k > b:
        check(int(padded[b]) == total - s, f"padding segment P_{b} = {int(padded[b])}, spec "
              f"T - S = {total} - {s}", "R-TAIL-1")
    rest = padded[k:] if tokens else padded[b + 1:] if segment else padded[b:]
    check(not rest.any(), f"entries past the real content are not zero-length: "
          f"{padded.tolist()}", "R-STATIC-1")
    check(bool(cu[0] == 0 and np.array_equal(np.diff(cu), padded) and cu[-1] == total),
          f"cu_seqlens_padded {cu.tolist()} does not add up P = {padded.tolist()}, total "
          f"{total}", "R-META-3")
    bound = req.lower_bound(lens, config)
    check(total % m == 0, f"total {total} is not a multiple of M = {m}", "R-TOTAL-4")
    check(total >= bound, f"total {total} < N = {bound}", "R-TOTAL-3")
    check(total - m < bound, f"total {total} is not the smallest: {total - m} also fits",
          "R-TOTAL-4")
    check(local * config["cp_size"] == total, f"local_rows {local} * cp != total {total}",
          "R-META-5")
    check(local % config["tp_size"] == 0, f"local_rows {local} not divisible by tp",
          "R-META-5")
