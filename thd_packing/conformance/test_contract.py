"""The contract tier: what TE, Megatron and FP8 GEMMs need of the target's own outputs (§12a).

Every test runs the target on every rank and judges the result with `contract.py` alone: the
target's own `cu_seqlens_padded` (and `cu_seqlens`, `max_seqlen` where given), never the
reference's plan, so a target of another convention is judged on what the consumers need. A
failed precondition (a buffer TE cannot partition) is reported under its own rule, and the rules
that need it (R-CONSUMER-6, -7, -10 to -12) set such a case aside and judge the others
(`_buffer`), so one misaligned bucket cannot hide a misplaced token.

Crash-robust: the degenerate batches (every sequence empty, one row in all; B = 0 is not valid,
R-ERR-7) are their own named cases (`test_contract_degenerate`), and every check runs three
times: on any draw, on draws without the degenerate batches (`..._nondegenerate`), and on draws
without zero-length sequences (`..._nonempty`). A target that crashes on, or mishandles, an
all-empty batch or zero-length sequences (hypothesis then shrinks every failure to them) still
has every other rule judged on the inputs that do not hit it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, example, given, reject
from hypothesis import strategies as st

from . import buffer, contract, protocol
from .compare import names_item
from .protocol import zero_length_of
from .running import RankResult, run_target
from .strategies import (
    ALL_EMPTY_BATCHES,
    Batch,
    PackCase,
    batches,
    configs,
    fit_static,
    fp8_strategy,
    pack_cases,
)
from .under_test import (
    RuleViolation,
    assume_declared,
    caps,
    declined_by,
    needs,
    note_given,
    prop_settings,
    target,
)

CAPS = caps()
_SMALL = batches(caps=CAPS, max_batch=16, budget=800)
_CONFIGS = configs(caps=CAPS)
# (tp, cp) at the extremes that matter for FP8 and many ranks: tp * cp from 16 to 64 (a total
# padded for tp * cp <= 8 only passes the ordinary draws, sizes mostly 1 to 3).
EXTREME_SIZES = ((16, 1), (8, 2), (4, 4), (2, 8), (16, 2), (8, 4), (4, 8), (16, 4), (8, 8),
                 (4, 16), (2, 32), (1, 64), (64, 1))


def _extreme_configs(**kwargs: Any) -> Any:
    return st.sampled_from(EXTREME_SIZES).flatmap(
        lambda tc: configs(caps=CAPS, tp=st.just(tc[0]), cp=st.just(tc[1]), **kwargs))


_WIDE_CONFIGS = st.one_of(_CONFIGS, _extreme_configs())

# The draws every contract check judges: "any" batch, none of the degenerate ones, and no
# zero-length sequence at all (test-name suffix, what the draw leaves out).
DRAWS = {"": "any", "_nondegenerate": "nondegenerate", "_nonempty": "nonempty"}


def degenerate(lengths: tuple[int, ...]) -> bool:
    """Every sequence empty, or one real row in all: the batches with their own named cases."""
    return sum(lengths) <= 1


def excluding_batch(draw: str, batch: Batch) -> Batch:
    """The batch as the named draw judges it: "nondegenerate" gives a degenerate batch a first
    sequence of 2 tokens (zero-length sequences elsewhere stay, trailing ones too);
    "nonempty" drops the zero-length sequences, then does the same."""
    lengths = batch.lengths
    if draw == "any":
        return batch
    if draw == "nonempty":
        lengths = tuple(n for n in lengths if n) or (2,)
    if degenerate(lengths):
        lengths = (2, *lengths[1:])
    return batch if lengths == batch.lengths else dataclasses.replace(batch, lengths=lengths)


def excluding(draw: str, case: PackCase) -> PackCase:
    """A pinned case as the named draw judges it (its config sizes nothing to the batch)."""
    batch = excluding_batch(draw, case.batch)
    return case if batch is case.batch else dataclasses.replace(case, batch=batch)


def _cases(need_roll: bool | None, draw: str = "any", config: Any = _CONFIGS) -> Any:
    """Drawn cases whose batch is excluded before the config is fitted to it (max_num_seqs,
    fixed_total)."""
    return pack_cases(caps=CAPS, need_roll=need_roll, config=config,
                      batch=_SMALL.map(lambda batch: excluding_batch(draw, batch)))


def _zz(**config: Any) -> dict[str, Any]:
    return {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False, "bucket": None,
            "min_local_rows": None, **config}


def _run(case: PackCase) -> tuple[list[np.ndarray], list[RankResult]]:
    """The batch's sequences as the target's segments stand for them (all of them, or the
    non-empty ones where the target declares the convention zero_length="omit",
    R-CONSUMER-14), and every rank's output."""
    assume_declared(case)  # a pinned example may use a feature the target declines
    seqs = case.batch.arrays()
    got = run_target(case, seqs)
    return contract.segment_batch(seqs, zero_length_of(target())), got


def _buffer(got: list[RankResult], case: PackCase) -> buffer.Buffer:
    """The target's buffer for the row checks; a case whose buffer breaks R-CONSUMER-1..3 is
    rejected here (test_contract_buffer reports it), so these rules are decided on the others."""
    try:
        return buffer.check_buffer(got, case.config)
    except RuleViolation:
        reject()


def _gives(got: list[RankResult], key: str) -> bool:
    """Every rank gave the optional meta field `key`. A draw without it is not judged, and the
    others are; a test that met no rank with it has its rule declined
    (under_test.outputs_declined)."""
    given = all(key in r.meta for r in got)
    note_given(key, given)
    return given


def _has_positions(got: list[RankResult]) -> bool:
    """Every rank gave position ids. A draw where one gave none (`Packed(position_ids=None)`)
    is not judged, and the others are: a target may give them for some configs only (AReaL at
    cp = 1). A test that met no rank with them has its position rules declined
    (under_test.outputs_declined)."""
    return all(r.pos is not None for r in got)


# The errata's and the smallest cases, as explicit examples.
E1_BUCKET = PackCase(_zz(cp_size=2, bucket=6), Batch((3,)))
E1_TP = PackCase(_zz(tp_size=2, bucket=3), Batch((1,)))
E2_MIN_ROWS = PackCase(_zz(cp_size=2, min_local_rows=3), Batch((1,)))
FP8_BUCKET = PackCase(_zz(cp_size=2, fp8=True, bucket=100), Batch((7, 0, 3)))
TRAILING_EMPTY = PackCase(_zz(cp_size=2), Batch((3, 0, 0), trail=(2,)))
ALL_EMPTY = PackCase(_zz(cp_size=2), Batch((0, 0)))
E3_LABEL = PackCase(_zz(cp_size=2), Batch((4, 0)), need_roll=True)
E4_LEAK = PackCase(_zz(tp_size=2), Batch((1, 2)), need_roll=True)
# MXFP8 with sequence parallelism: padding to tp * 16 trips TE's divisible-by-32 assertion.
MXFP8_TP = PackCase(_zz(tp_size=2, fp8="mxfp8"), Batch((5, 3)))
# verl's erratum E-2 under FP8: one row per rank for the FP8 GEMMs.
E2_FP8 = PackCase(_zz(cp_size=2, fp8=True, min_local_rows=1), Batch((0,)))


# Spec 1.2: labels beside the inputs; TRL's labels with zero-length and one-token sequences.
IGNORE_LABELS = PackCase(_zz(tp_size=2, labels="ignore"), Batch((3, 0, 1, 2)), need_roll=True)
# Two sequences at cp = 1: positions must restart (a packer may give them at cp = 1 only).
TWO_CP1 = PackCase(_zz(), Batch((2, 3)))
# Ring attention's pack: no per-sequence alignment, the padding after the last sequence.
RING = PackCase(_zz(cp_size=2, cp_layout="contiguous", seq_align="none"), Batch((1, 1)))
# FP8 at tp * cp >= 16, each recipe: a total padded for small tp * cp only fails here.
FP8_WIDE = [PackCase(_zz(tp_size=tp, cp_size=cp, fp8=fp8), Batch((5, 0, 3)))
            for (tp, cp), fp8 in (((8, 2), True), ((4, 4), "tensor"), ((2, 8), "mxfp8"),
                                  ((16, 4), "block"), ((8, 8), "nvfp4"), ((1, 64), True),
                                  ((32, 2), "mxfp8"))]


def _judging(check: Callable[[PackCase], None], draw: str) -> Callable[[PackCase], None]:
    def test(case: PackCase) -> None:
        check(excluding(draw, case))
    return test


def _contract(name: str, check: Callable[[PackCase], None], *, rules: tuple[str, ...],
              need_roll: bool | None = False, weight: float = 0.5, declares: tuple[str, ...] = (),
              examples: tuple[PackCase, ...] = (), config: Any = _CONFIGS) -> None:
    """Register `check` as one test per draw of DRAWS (`name`, `name_nondegenerate`,
    `name_nonempty`), each with the rule markers, the pinned examples (judged as that draw
    judges them) and half the example budget for the two narrower draws."""
    for suffix, draw in DRAWS.items():
        test = _judging(check, draw)
        test.__name__ = test.__qualname__ = name + suffix
        test.__doc__ = check.__doc__ if draw == "any" else \
            f"{check.__doc__} (draws: {draw})"
        fn: Any = given(_cases(need_roll, draw, config))(test)
        for case in reversed(examples):
            fn = example(excluding(draw, case))(fn)
        fn = prop_settings(weight if draw == "any" else weight / 2)(fn)
        for cap in declares:
            fn = needs(cap)(fn)
        globals()[name + suffix] = pytest.mark.rules(*rules)(fn)


def _check_buffer(case: PackCase) -> None:
    """The target's cu_seqlens_padded is one buffer TE can partition: from 0, non-decreasing,
    ending at the total; zigzag segments divisible by 2cp; n * cp rows in all."""
    _, got = _run(case)
    buffer.check_buffer(got, case.config)


def _check_tp_split(case: PackCase) -> None:
    """Each rank's rows split by tp (Megatron sequence parallelism)."""
    _, got = _run(case)
    buffer.check_tp_split(got, case.config)


def _check_fp8_split(case: PackCase) -> None:
    """With FP8, each TP slice of a rank holds a multiple of the recipe's q rows (FP8 GEMMs;
    q = 16 for fp8=True, 'tensor' and 'block', 32 'mxfp8', 128 'nvfp4'), up to tp * cp = 64."""
    _, got = _run(case)
    buffer.check_fp8_split(got, case.config)


def _check_real_cu_seqlens(case: PackCase) -> None:
    """Real cu_seqlens has the lengths L_i, within the padded segments."""
    seqs, got = _run(case)
    if _gives(got, "cu_seqlens"):
        buffer.check_real_cu_seqlens([int(s.shape[0]) for s in seqs], got,
                                     buffer.padded_bounds(got))


def _check_max_seqlen(case: PackCase) -> None:
    """max_seqlen covers every padded segment."""
    _, got = _run(case)
    if _gives(got, "max_seqlen"):
        buffer.check_max_seqlen(got, buffer.padded_bounds(got))


def _check_tokens(case: PackCase) -> None:
    """Every real token at the slot TE's partition of the target's own buffer gives it: once, in
    its own segment, in order; no sequence dropped."""
    seqs, got = _run(case)
    contract.check_tokens(seqs, got, _buffer(got, case))


def _check_positions(case: PackCase) -> None:
    """Real rows' position ids are their offsets in their own segment."""
    seqs, got = _run(case)
    if _has_positions(got):
        contract.check_positions(seqs, got, _buffer(got, case))


def _check_labels(case: PackCase) -> None:
    """need_roll: every real row but a sequence's last holds its own sequence's next token."""
    seqs, got = _run(case)
    contract.check_labels(seqs, got, _buffer(got, case))


def _check_no_leak(case: PackCase) -> None:
    """No padding row holds another sequence's token (reported as a leak with its severity)."""
    seqs, got = _run(case)
    contract.check_no_leak(seqs, got, _buffer(got, case),
                           need_roll=case.need_roll, pad_value=case.pad_value,
                           labels=case.config.get("labels", "roll"),
                           ignore_index=case.config.get("ignore_index", -100))


def _check_ignored_labels(case: PackCase) -> None:
    """labels='ignore': every padding row and each sequence's last token hold ignore_index."""
    seqs, got = _run(case)
    contract.check_ignored_labels(seqs, got, _buffer(got, case),
                                  case.config.get("ignore_index", -100))


def _check_position_boundaries(case: PackCase) -> None:
    """Segments derived from position ids alone start at every non-empty sequence's first
    token and nowhere inside its tokens (transformers' padding-free rule, R-PID-1)."""
    seqs, got = _run(case)
    if _has_positions(got):
        contract.check_position_boundaries(seqs, got, _buffer(got, case))


def _check_positions_not_negative(case: PackCase) -> None:
    """No position id is negative, specified or not, with or without need_roll (a -1 before a
    sequence would glue a row to it for a position-id consumer, R-PID-2)."""
    _, got = _run(case)
    for rank, result in enumerate(got):
        pos = np.asarray(result.pos)
        if pos.size and pos.dtype.kind in "iu" and int(pos.min()) < 0:
            k = int(np.argmin(pos))
            raise RuleViolation(f"rank {rank} row {k}: position id {int(pos[k])}", {"R-POS-4"})


def _check_integer_dtypes(case: PackCase) -> None:
    """Position ids and the metadata arrays in integer dtypes as the target produced them (and
    a token-id packer's ids and labels, refused by its glue otherwise); a pack of a valid
    input returns its outputs."""
    _, got = _run(case)
    buffer.check_integer_dtypes(got)


def _check_unpack(case: PackCase) -> None:
    """The target's unpack of its own pack, with its own metadata, returns the batch."""
    _, got = _run(case)
    seqs = case.batch.arrays()  # all B sequences, whatever the metadata keeps (R-CONSUMER-14)
    unpacked = target().unpack([g.rows for g in got], got[0].meta, dict(case.config))
    contract.check_unpack(seqs, unpacked)


_contract("test_contract_buffer", _check_buffer, need_roll=None, weight=1.0,
          rules=("R-CONSUMER-1", "R-CONSUMER-2", "R-CONSUMER-3"),
          examples=(E1_BUCKET, E2_MIN_ROWS, TRAILING_EMPTY, ALL_EMPTY))
_contract("test_contract_tp_split", _check_tp_split, rules=("R-CONSUMER-4",), weight=1.0,
          examples=(E1_TP,), config=_WIDE_CONFIGS)
_contract("test_contract_fp8_split", _check_fp8_split, rules=("R-CONSUMER-5",), declares=("fp8",),
          examples=(FP8_BUCKET, E2_FP8, MXFP8_TP, *FP8_WIDE),
          config=st.one_of(configs(caps=CAPS, fp8=fp8_strategy(CAPS)),
                           _extreme_configs(fp8=fp8_strategy(CAPS))))
_contract("test_contract_real_cu_seqlens", _check_real_cu_seqlens, rules=("R-CONSUMER-8",),
          examples=(TRAILING_EMPTY,))
_contract("test_contract_max_seqlen", _check_max_seqlen, rules=("R-CONSUMER-9",),
          examples=(TRAILING_EMPTY,))
_contract("test_contract_tokens", _check_tokens,
          rules=("R-CONSUMER-6", "R-CONSUMER-7", "R-CONSUMER-14"),
          weight=1.0, examples=(E1_BUCKET, TRAILING_EMPTY, ALL_EMPTY))
_contract("test_contract_positions", _check_positions, rules=("R-CONSUMER-10",),
          examples=(TWO_CP1,))
_contract("test_contract_labels", _check_labels, rules=("R-CONSUMER-11",), need_roll=True,
          declares=("need_roll",), examples=(E3_LABEL,))
_contract("test_contract_no_leak", _check_no_leak, rules=("R-CONSUMER-12",), need_roll=None,
          examples=(E4_LEAK,))
_contract("test_contract_ignored_labels", _check_ignored_labels, rules=("R-CONSUMER-15",),
          need_roll=True, declares=("need_roll", "labels_ignore"), examples=(IGNORE_LABELS,),
          config=configs(caps=CAPS, labels=st.just("ignore")))
_contract("test_contract_position_boundaries", _check_position_boundaries, rules=("R-PID-2",),
          examples=(TWO_CP1, RING, TRAILING_EMPTY))
_contract("test_position_ids_never_negative", _check_positions_not_negative,
          rules=("R-POS-4",), need_roll=None)
_contract("test_contract_integer_dtypes", _check_integer_dtypes,
          rules=("R-CONSUMER-16", "R-CONSUMER-17"), need_roll=None, weight=0.25)
_contract("test_contract_unpack", _check_unpack, rules=("R-CONSUMER-13",), declares=("unpack",),
          examples=(TRAILING_EMPTY, ALL_EMPTY))


# The degenerate batches, named: every contract check on each, under any config.
DEGENERATE = {**ALL_EMPTY_BATCHES, "one-row": (1,), "one-row-among-empty": (0, 1, 0)}
# The rules the degenerate cases are credited with: every contract rule but R-CONSUMER-8 and
# -9, which need a field the target may not give (their own tests say when it does not; a
# violation here is still charged). A rule of a feature the target lacks (R-CONSUMER-5 without
# FP8) is declined by the report (rules.UNDER_FEATURE), not passed.
_ALL_RULES = (*(f"R-CONSUMER-{k}" for k in range(1, 18) if k not in (8, 9)), "R-PID-2")


def _refused_as_empty(lengths: tuple[int, ...], error: BaseException | None) -> bool:
    """A target that omits zero-length sequences rejected a batch of only empty ones as R-ERR-7
    rejects an empty batch: ValueError, the message naming the batch (R-META-8)."""
    return (zero_length_of(target()) == "omit" and not any(lengths)
            and isinstance(error, ValueError)
            and names_item("batch|seqs", str(error)))


@pytest.mark.rules(*_ALL_RULES)
@pytest.mark.parametrize("batch", [
    pytest.param(name, marks=needs("zero_length")) if 0 in lengths else name
    for name, lengths in DEGENERATE.items()])
@prop_settings(0.2)
@given(config=_CONFIGS, need_roll=st.booleans())
def test_contract_degenerate(batch: str, config: dict[str, Any], need_roll: bool) -> None:
    """A degenerate batch (every sequence empty, one row in all) under a drawn config: every
    pack rule of the contract, and unpack where the target has it. A crash here is a target
    error on this named input; the other tests judge the rules on the batches it spares. A
    target that omits zero-length sequences may refuse a batch of only empty ones (R-META-8)."""
    lengths = DEGENERATE[batch]
    roll = need_roll and "need_roll" in CAPS
    case = PackCase(fit_static(config, len(lengths)), Batch(lengths), need_roll=roll)
    # every target meets these batches here, one that omits zero-length sequences too
    assume(set(declined_by(case.config, lengths, need_roll=roll)) <= {protocol.ALL_EMPTY})
    seqs = case.batch.arrays()
    try:
        got = run_target(case, seqs)
    except RuleViolation as exc:
        if _refused_as_empty(lengths, exc.__cause__):
            return  # R-META-8's MAY: an omitter's batch without a token is an empty batch
        raise
    contract.check_pack(seqs, got, case.config, need_roll=roll,
                        zero_length=zero_length_of(target()))
    if "unpack" in CAPS and not roll:
        unpacked = target().unpack([g.rows for g in got], got[0].meta, dict(case.config))
        contract.check_unpack(seqs, unpacked)
