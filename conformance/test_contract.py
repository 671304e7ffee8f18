"""The contract tier: what TE, Megatron and FP8 GEMMs need of the target's own outputs (§12a).

Every test runs the target on every rank and judges the result with `contract.py` alone: the
target's own `cu_seqlens_padded` (and `cu_seqlens`, `max_seqlen` where given), never the
reference's plan, so a target of another convention is judged on what the consumers need. A
failed precondition (a buffer TE cannot partition) is reported under its own rule, and the rules
that need it (R-CONSUMER-6, -7, -10 to -12) set such a case aside and judge the others
(`_buffer`), so one misaligned bucket cannot hide a misplaced token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, reject
from hypothesis import strategies as st

from . import contract
from . import harness as h
from .protocol import zero_length_of
from .strategies import Batch, PackCase, batches, configs, fp8_strategy, pack_cases

CAPS = h.caps()
_SMALL = batches(caps=CAPS, max_batch=16, budget=800)
_CONFIGS = configs(caps=CAPS)


def _cases(need_roll: bool | None) -> Any:
    return pack_cases(caps=CAPS, need_roll=need_roll, config=_CONFIGS, batch=_SMALL)


def _zz(**config: Any) -> dict[str, Any]:
    return {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False, "bucket": None,
            "min_local_rows": None, **config}


def _run(case: PackCase) -> tuple[list[np.ndarray], list[h.RankResult]]:
    """The batch's sequences as the target's segments stand for them (all of them, or the
    non-empty ones where the target declares the convention zero_length="omit",
    R-CONSUMER-14), and every rank's output."""
    h.assume_declared(case)  # a pinned example may use a feature the target declines
    seqs = case.batch.arrays()
    got = h.run_target(case, seqs)
    return contract.segment_batch(seqs, zero_length_of(h.target())), got


def _buffer(got: list[h.RankResult], case: PackCase) -> contract.Buffer:
    """The target's buffer for the row checks; a case whose buffer breaks R-CONSUMER-1..3 is
    rejected here (test_contract_buffer reports it), so these rules are decided on the others."""
    try:
        return contract.check_buffer(got, case.config)
    except h.RuleViolation:
        reject()


def _given(got: list[h.RankResult], key: str) -> None:
    """Skip a rule whose field the target never gives: no verdict without data."""
    if key not in got[0].meta:
        pytest.skip(f"target {h.target().name!r} gives no {key} (the rule needs it)")


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


@pytest.mark.rules("R-CONSUMER-1", "R-CONSUMER-2", "R-CONSUMER-3")
@h.prop_settings()
@example(E1_BUCKET)
@example(E2_MIN_ROWS)
@example(TRAILING_EMPTY)
@example(ALL_EMPTY)
@given(_cases(None))
def test_contract_buffer(case: PackCase) -> None:
    """The target's cu_seqlens_padded is one buffer TE can partition: from 0, non-decreasing,
    ending at the total; zigzag segments divisible by 2cp; n * cp rows in all."""
    _, got = _run(case)
    contract.check_buffer(got, case.config)


@pytest.mark.rules("R-CONSUMER-4")
@h.prop_settings()
@example(E1_TP)
@given(_cases(False))
def test_contract_tp_split(case: PackCase) -> None:
    """Each rank's rows split by tp (Megatron sequence parallelism)."""
    _, got = _run(case)
    contract.check_tp_split(got, case.config)


@pytest.mark.rules("R-CONSUMER-5")
@h.needs("fp8")
@h.prop_settings(0.5)
@example(FP8_BUCKET)
@example(E2_FP8)
@example(MXFP8_TP)
@given(pack_cases(caps=CAPS, need_roll=False, config=configs(caps=CAPS, fp8=fp8_strategy(CAPS)),
                  batch=_SMALL))
def test_contract_fp8_split(case: PackCase) -> None:
    """With FP8, each TP slice of a rank holds a multiple of the recipe's q rows (FP8 GEMMs;
    q = 16 for fp8=True, 'tensor' and 'block', 32 'mxfp8', 128 'nvfp4')."""
    _, got = _run(case)
    contract.check_fp8_split(got, case.config)


@pytest.mark.rules("R-CONSUMER-8")
@h.prop_settings(0.5)
@example(TRAILING_EMPTY)
@given(_cases(False))
def test_contract_real_cu_seqlens(case: PackCase) -> None:
    """Real cu_seqlens has the lengths L_i, within the padded segments."""
    seqs, got = _run(case)
    _given(got, "cu_seqlens")
    contract.check_real_cu_seqlens([int(s.shape[0]) for s in seqs], got,
                                   contract.padded_bounds(got))


@pytest.mark.rules("R-CONSUMER-9")
@h.prop_settings(0.5)
@example(TRAILING_EMPTY)
@given(_cases(False))
def test_contract_max_seqlen(case: PackCase) -> None:
    """max_seqlen covers every padded segment."""
    _, got = _run(case)
    _given(got, "max_seqlen")
    contract.check_max_seqlen(got, contract.padded_bounds(got))


@pytest.mark.rules("R-CONSUMER-6", "R-CONSUMER-7", "R-CONSUMER-14")
@h.prop_settings()
@example(E1_BUCKET)
@example(TRAILING_EMPTY)
@example(ALL_EMPTY)
@given(_cases(False))
def test_contract_tokens(case: PackCase) -> None:
    """Every real token at the slot TE's partition of the target's own buffer gives it: once, in
    its own segment, in order; no sequence dropped."""
    seqs, got = _run(case)
    contract.check_tokens(seqs, got, _buffer(got, case))


@pytest.mark.rules("R-CONSUMER-10")
@h.prop_settings(0.5)
@given(_cases(False))
def test_contract_positions(case: PackCase) -> None:
    """Real rows' position ids are their offsets in their own segment."""
    seqs, got = _run(case)
    contract.check_positions(seqs, got, _buffer(got, case))


@pytest.mark.rules("R-CONSUMER-11")
@h.needs("need_roll")
@h.prop_settings(0.5)
@example(E3_LABEL)
@given(_cases(True))
def test_contract_labels(case: PackCase) -> None:
    """need_roll: every real row but a sequence's last holds its own sequence's next token."""
    seqs, got = _run(case)
    contract.check_labels(seqs, got, _buffer(got, case))


@pytest.mark.rules("R-CONSUMER-12")
@h.prop_settings(0.5)
@example(E4_LEAK)
@given(_cases(None))
def test_contract_no_leak(case: PackCase) -> None:
    """No padding row holds another sequence's token (reported as a leak with its severity)."""
    seqs, got = _run(case)
    contract.check_no_leak(seqs, got, _buffer(got, case),
                           need_roll=case.need_roll, pad_value=case.pad_value,
                           labels=case.config.get("labels", "roll"),
                           ignore_index=case.config.get("ignore_index", -100))


# Spec 1.2: labels beside the inputs; TRL's labels with zero-length and one-token sequences.
IGNORE_LABELS = PackCase(_zz(tp_size=2, labels="ignore"), Batch((3, 0, 1, 2)), need_roll=True)
# Ring attention's pack: no per-sequence alignment, the padding after the last sequence.
RING = PackCase(_zz(cp_size=2, cp_layout="contiguous", seq_align="none"), Batch((1, 1)))


@pytest.mark.rules("R-CONSUMER-15")
@h.needs("need_roll", "labels_ignore")
@h.prop_settings(0.5)
@example(IGNORE_LABELS)
@given(pack_cases(caps=CAPS, need_roll=True, batch=_SMALL,
                  config=configs(caps=CAPS, labels=st.just("ignore"))))
def test_contract_ignored_labels(case: PackCase) -> None:
    """labels='ignore': every padding row and each sequence's last token hold ignore_index."""
    seqs, got = _run(case)
    contract.check_ignored_labels(seqs, got, _buffer(got, case),
                                  case.config.get("ignore_index", -100))


@pytest.mark.rules("R-PID-2")
@h.prop_settings(0.5)
@example(RING)
@example(TRAILING_EMPTY)
@given(_cases(False))
def test_contract_position_boundaries(case: PackCase) -> None:
    """Segments derived from position ids alone start at every non-empty sequence's first
    token and nowhere inside its tokens (transformers' padding-free rule, R-PID-1)."""
    seqs, got = _run(case)
    contract.check_position_boundaries(seqs, got, _buffer(got, case))


@pytest.mark.rules("R-CONSUMER-13")
@h.needs("unpack")
@h.prop_settings(0.5)
@example(TRAILING_EMPTY)
@example(ALL_EMPTY)
@given(_cases(False))
def test_contract_unpack(case: PackCase) -> None:
    """The target's unpack of its own pack, with its own metadata, returns the batch."""
    _, got = _run(case)
    seqs = case.batch.arrays()  # all B sequences, whatever the metadata keeps (R-CONSUMER-14)
    unpacked = h.target().unpack([g.rows for g in got], got[0].meta, dict(case.config))
    contract.check_unpack(seqs, unpacked)


@pytest.mark.rules("R-POS-4")
@h.prop_settings(0.5)
@given(_cases(None))
def test_position_ids_never_negative(case: PackCase) -> None:
    """No position id is negative, specified or not, with or without need_roll (a -1 before a
    sequence would glue a row to it for a position-id consumer, R-PID-2)."""
    _, got = _run(case)
    for rank, result in enumerate(got):
        pos = np.asarray(result.pos)
        if pos.size and pos.dtype.kind in "iu" and int(pos.min()) < 0:
            k = int(np.argmin(pos))
            raise h.RuleViolation(f"rank {rank} row {k}: position id {int(pos[k])}", {"R-POS-4"})
