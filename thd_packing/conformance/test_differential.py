"""Differential properties: the target equals the reference on every specified slot, every rank.

Split by feature so that the rule matrix says *which* part of the spec a target gets wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from thd_packing import reference

from .compare import (
    check_meta,
    check_positions,
    check_rows,
    check_same_rejection,
    meta_mismatches,
    outcome,
)
from .contract import segment_lengths
from .protocol import plain_meta, zero_length_of
from .running import (
    ref_config,
    run_reference,
    run_reference_on_its_plan,
    run_target,
)
from .strategies import (
    ALL_EMPTY_BATCHES,
    Batch,
    PackCase,
    batches,
    configs,
    fit_static,
    pack_cases,
    pad_values,
    rows_bound,
    with_a_token,
    zero_length_batches,
)
from .under_test import (
    RuleViolation,
    assume_declared,
    caps,
    cited,
    needs,
    note_violation,
    prop_settings,
    target,
    within_rows,
)

CAPS = caps()
# Sharding, labels and empty sequences are tested without the total-level stages (bucket,
# min_local_rows), so that a bug there does not hide one here; test_pack_matches_reference
# combines everything.
NO_TOTAL_STAGES: dict[str, Any] = {"bucket": st.none(), "min_local_rows": st.none()}
# Metadata tests need no data: one int64 column keeps them cheap.
META_BATCH = batches(dtypes=("int64",), trails=((),), caps=CAPS)


def _meta_case(config: st.SearchStrategy[dict]) -> st.SearchStrategy[PackCase]:
    return pack_cases(caps=frozenset(), need_roll=False, config=config, batch=META_BATCH)


def _check_meta(case: PackCase) -> None:
    assume_declared(case)
    seqs = case.batch.arrays()
    check_meta(run_target(case, seqs), run_reference(case, seqs), case.config)


@pytest.mark.rules("R-ALIGN-1", "R-ALIGN-2", "R-ALIGN-3", "R-META-1", "R-META-2", "R-META-3",
                   "R-META-4", "R-META-6")
@prop_settings()
@given(_meta_case(configs(caps=CAPS, bucket=st.none(), min_local_rows=st.none())))
def test_plan_alignment_matches_reference(case: PackCase) -> None:
    """Per-sequence padding, boundaries and max_seqlen, without total-level stages."""
    _check_meta(case)


@needs("fp8")
@pytest.mark.rules("R-ALIGN-2", "R-TOTAL-1", "R-TOTAL-2", "R-TOTAL-4", "R-TOTAL-5")
@prop_settings()
@given(_meta_case(configs(caps=CAPS, fp8=st.just(True), bucket=st.none(),
                          min_local_rows=st.none(), tp=st.integers(1, 4),
                          cp=st.integers(1, 4))))
def test_plan_fp8_matches_reference(case: PackCase) -> None:
    """FP8: lcm(16, A0) per sequence, 128 * A0 for the total, surplus on the last sequence."""
    _check_meta(case)


@needs("bucket")
@pytest.mark.rules("R-TOTAL-2", "R-TOTAL-4", "R-TOTAL-5", "R-META-5")
@prop_settings()
@example(PackCase(config={"tp_size": 2, "cp_size": 1, "bucket": 3}, batch=Batch((1,))))  # E-1
@example(PackCase(config={"cp_size": 2, "bucket": 6}, batch=Batch((3,))))  # erratum E-1
@given(_meta_case(configs(caps=CAPS, fp8=st.just(False), min_local_rows=st.none(),
                          bucket=st.integers(1, 1100))))
def test_plan_bucket_matches_reference(case: PackCase) -> None:
    """Bucket: the total is a multiple of lcm(A, bucket), also when the bucket is not a
    multiple of the alignment (erratum E-1)."""
    _check_meta(case)


@needs("min_local_rows")
@pytest.mark.rules("R-TOTAL-3", "R-TOTAL-4", "R-TOTAL-5", "R-META-5")
@prop_settings()
@example(PackCase(config={"cp_size": 2, "min_local_rows": 3}, batch=Batch((1,))))  # E-2
@example(PackCase(config={"fp8": True, "min_local_rows": 200}, batch=Batch((1,))))  # E-2
@given(_meta_case(configs(caps=CAPS, fp8=st.just(False), bucket=st.none(),
                          min_local_rows=st.integers(1, 300))))
def test_plan_min_local_rows_matches_reference(case: PackCase) -> None:
    """min_local_rows: the bound cp * min_local_rows is rounded up to the modulus (E-2)."""
    _check_meta(case)


@pytest.mark.rules("R-META-1", "R-META-2", "R-META-3", "R-META-4", "R-META-5", "R-META-6",
                   "R-TOTAL-2", "R-TOTAL-3", "R-TOTAL-4", "R-TOTAL-5")
@prop_settings()
@given(_meta_case(configs(caps=CAPS)))
def test_plan_any_config_matches_reference(case: PackCase) -> None:
    """All stages together: fp8, bucket and min_local_rows combined."""
    _check_meta(case)


@needs("plan")
@pytest.mark.rules("R-TOTAL-6", "R-META-1", "R-META-3", "R-META-5")
@prop_settings()
@example([2**31 - 1], {}, "list")  # the largest total that fits int32
@example([2**31 - 2, 1], {}, "ndarray-int64")
@example([2**31 - 1, 1], {}, "tuple")  # one row too many
@example([3], {"fixed_total": 2**31 - 1}, "list")  # the largest fixed total (R-ERR-14)
@given(
    st.lists(st.integers(0, 2**28), min_size=1, max_size=8).map(with_a_token),
    configs(caps=CAPS),
    st.sampled_from(["list", "tuple", "ndarray-int64", "ndarray-int32"]),
)
def test_plan_only_large_lengths_match_reference(seqlens: list[int], config: dict,
                                                 container: str) -> None:
    """Metadata without data, for lengths near the int32 limit (capability `plan`); the
    lengths come as a list, tuple or NumPy array (R-ERR-1: any integers). Totals above the
    target's `max_rows` are not run."""
    assume_declared(config=config, lengths=seqlens)
    assume(within_rows(rows_bound(seqlens, config)))
    if container == "tuple":
        seqlens = tuple(seqlens)  # type: ignore[assignment]
    elif container.startswith("ndarray"):
        dtype = container.split("-")[1]
        if max(seqlens) > np.iinfo(dtype).max:
            dtype = "int64"
        seqlens = np.asarray(seqlens, dtype=dtype)  # type: ignore[assignment]
    # The plan of the sequences the target's segments stand for (R-META-8)
    segments = segment_lengths(seqlens, zero_length_of(target()))
    want = outcome(lambda: reference.plan_thd(seqlens, ref_config(config)))
    got = outcome(lambda: target().plan(seqlens, dict(config)))
    check_same_rejection(want, got, f"plan({seqlens}, {config})")
    if want is None:
        problems = meta_mismatches(target().plan(seqlens, dict(config)),
                                   reference.plan_thd(segments, ref_config(config)))
        assert not problems, "; ".join(problems)


def _check_pack(case: PackCase) -> None:
    """The whole pack against the reference: its plan, rows and position ids."""
    assume_declared(case)  # a pinned example with a feature the target declines
    seqs = case.batch.arrays()
    got, want = run_target(case, seqs), run_reference(case, seqs)
    check_meta(got, want, case.config)
    check_rows(case, got, want)
    check_positions(case, got, want)


def _check_layout(case: PackCase) -> None:
    """Rows and position ids, judged on the slots of the rules the test cites; a failure of
    another rule met on the way (a wrong plan, a padding segment's position ids, R-TAIL-2) is
    reported without ending the search (`under_test.note_violation`). Where the plan differs
    from the spec's and the rows are not the spec's, they are judged on the plan the target
    reports; a plan the row map cannot lay out fails as a plan."""
    assume_declared(case)
    seqs = case.batch.arrays()
    got, want = run_target(case, seqs), run_reference(case, seqs)
    try:
        check_meta(got, want, case.config)
    except RuleViolation as wrong_plan:
        own = run_reference_on_its_plan(case, seqs, got)
        if own is None:
            raise
        note_violation(wrong_plan, case)
        try:  # the spec's rows: only the plan the target reports is wrong
            check_rows(case, got, want)
            check_positions(case, got, want)
            return
        except RuleViolation:
            want = own
    _check_slots(case, got, want)


def _check_slots(case: PackCase, got: list[Any], want: list[Any]) -> None:
    """Every slot; where one is wrong, the slots of the test's own rules decide the test and
    a wrong slot of another rule is reported apart."""
    try:
        check_rows(case, got, want)
        check_positions(case, got, want)
    except RuleViolation as wrong:
        check_rows(case, got, want, cited())
        check_positions(case, got, want, cited())
        note_violation(wrong, case)


@pytest.mark.rules("R-IN-1", "R-ALIGN-4", "R-ROW-1", "R-ROW-2", "R-POS-1", "R-POS-2",
                   "R-POS-3")
@prop_settings()
@example(PackCase(config={"cp_size": 2}, batch=Batch((3, 5), dtype="float32", seed=1),
                  pad_value=-0.0))
@given(pack_cases(caps=CAPS, need_roll=False))
def test_pack_matches_reference(case: PackCase) -> None:
    """Rows and position ids on every rank, any config, dtype and trailing shape."""
    _check_layout(case)


@pytest.mark.rules("R-SHARD-1", "R-ROW-1", "R-POS-2")
@prop_settings(0.5)
@given(pack_cases(caps=CAPS, need_roll=False,
                  config=configs(caps=CAPS, cp=st.just(1), **NO_TOTAL_STAGES)))
def test_single_rank_matches_reference(case: PackCase) -> None:
    """cp_size 1: the whole padded buffer in order, for either layout."""
    _check_layout(case)


@pytest.mark.rules("R-SHARD-2", "R-ROW-1", "R-POS-2")
@prop_settings()
@given(pack_cases(caps=CAPS, need_roll=False,
                  config=configs(caps=CAPS, cp=st.integers(2, 8), contiguous_cp=False,
                                 **NO_TOTAL_STAGES)))
def test_zigzag_matches_reference(case: PackCase) -> None:
    """Zigzag: chunk r and chunk 2cp-1-r of every sequence, in sequence order."""
    _check_layout(case)


@needs("contiguous")
@pytest.mark.rules("R-SHARD-3", "R-ROW-1", "R-POS-2")
@prop_settings(0.5)
@given(st.data())
def test_contiguous_matches_reference(data: st.DataObject) -> None:
    """Contiguous: rank r holds global rows [r * local_rows, (r+1) * local_rows)."""
    cfg = configs(caps=CAPS, cp=st.integers(2, 8), **NO_TOTAL_STAGES).map(
        lambda c: {**c, "cp_layout": "contiguous"})
    _check_layout(data.draw(pack_cases(caps=CAPS, need_roll=False, config=cfg), label="case"))


@needs("need_roll")
@pytest.mark.rules("R-ROLL-1", "R-ROLL-2", "R-ROLL-3")
@prop_settings()
@example(PackCase(config={"cp_size": 2}, batch=Batch((4,)), need_roll=True))  # erratum E-5
@example(PackCase(config={"cp_size": 2}, batch=Batch((3,)), need_roll=True))  # E-4
@example(PackCase(config={"tp_size": 2}, batch=Batch((1, 2)), need_roll=True))  # E-4
@example(PackCase(config={"cp_size": 2}, batch=Batch((4, 3)), need_roll=True))
@given(pack_cases(caps=CAPS, need_roll=True, config=configs(caps=CAPS,
                                                            **NO_TOTAL_STAGES)))
def test_need_roll_matches_reference(case: PackCase) -> None:
    """Next-token labels: x_i[j+1] at offset j with position id j+1; padding keeps pad_value
    (errata E-4, E-5)."""
    _check_layout(case)


@needs("zero_length")
@pytest.mark.rules("R-IN-2", "R-ROW-3")
@prop_settings()
@example(PackCase(config={"cp_size": 2}, batch=Batch((4, 0)), need_roll=True))  # erratum E-3
@example(PackCase(config={"cp_size": 2}, batch=Batch((4, 0, 2)), need_roll=True))
@example(PackCase(config={"cp_size": 1}, batch=Batch((0, 3, 0))))
@given(pack_cases(caps=CAPS, batch=zero_length_batches(caps=CAPS),
                  config=configs(caps=CAPS, tp=st.integers(1, 3),
                                 cp=st.integers(1, 4), **NO_TOTAL_STAGES)))
def test_zero_length_sequences_match_reference(case: PackCase) -> None:
    """Empty sequences anywhere never change another sequence's rows (erratum E-3); the batch
    of only empty ones is `test_all_empty_batch_matches_reference`'s."""
    _check_pack(case)


@needs("zero_length")
@pytest.mark.usefixtures("keeps_zero_length")
@pytest.mark.rules("R-IN-2", "R-ROW-3")
@pytest.mark.parametrize("batch", list(ALL_EMPTY_BATCHES))
@prop_settings(0.3)
@example(config={"cp_size": 2}, need_roll=True, trail=(), pad=0)  # erratum E-3
@example(config={"cp_size": 2}, need_roll=False, trail=(), pad=0)
@given(config=configs(caps=CAPS), need_roll=st.booleans(), trail=st.sampled_from([(), (2,)]),
       pad=pad_values("int64"))
def test_all_empty_batch_matches_reference(batch: str, config: dict[str, Any], need_roll: bool,
                                           trail: tuple[int, ...], pad: Any) -> None:
    """A batch of only empty sequences (valid, R-IN-2) under any config: its padding, plan and
    position ids equal the reference's. Its own named test, so that a target that mishandles it
    has one finding, and every other property judges the batches with a token."""
    lengths = ALL_EMPTY_BATCHES[batch]
    case = PackCase(fit_static(config, len(lengths)),
                    Batch(lengths, trail if "trailing_dims" in CAPS else ()),
                    need_roll=need_roll and "need_roll" in CAPS,
                    pad_value=pad if "pad_value" in CAPS else 0)
    _check_pack(case)


@needs("loss_mask")
@pytest.mark.rules("R-LABEL-3")
@prop_settings(0.5)
@example([3, 1, 0, 5], {"cp_size": 2})
@example([4, 2], {"cp_size": 2, "cp_layout": "contiguous", "bucket": 16})
@given(st.lists(st.integers(0 if "zero_length" in CAPS else 1, 200), min_size=1, max_size=12)
       .map(with_a_token), configs(caps=CAPS))
def test_loss_mask_matches_reference(seqlens: list[int], config: dict[str, Any]) -> None:
    """The target's loss mask (capability `loss_mask`) equals the reference's on the
    reference's plan: a bool per local row, True exactly where the row's label is the next
    token of its own sequence."""
    assume_declared(config=config, lengths=seqlens)
    cfg = ref_config(config)
    plan = reference.plan_thd(seqlens, cfg)
    meta = plain_meta(plan)
    for rank in range(cfg.cp_size):
        got = np.asarray(target().loss_mask(dict(meta), dict(config), rank))
        want = reference.loss_mask(plan, cfg, rank)
        where = f"seqlens={seqlens}, config={config}, rank {rank}"
        if got.dtype != np.bool_ or got.shape != want.shape:
            raise RuleViolation(f"{where}: loss mask is {got.dtype}{list(got.shape)}, the spec "
                                f"bool{list(want.shape)}", {"R-LABEL-3"})
        wrong = np.flatnonzero(got != want)
        if wrong.size:
            k = int(wrong[0])
            raise RuleViolation(f"{where}: local row {k} has loss mask {bool(got[k])}, the "
                                f"spec {bool(want[k])}", {"R-LABEL-3"})


# ----------------------------------------------------------------------------------------------
# Spec 1.1 conventions, each behind its capability: the target against the reference under the
# same convention (a target with a fixed one, such as verl's FSDP path with tail='segment', is
# compared under its own).


@needs("seq_align_cp")
@pytest.mark.rules("R-ALIGN-5", "R-TOTAL-2", "R-TOTAL-4", "R-META-1", "R-META-3")
@prop_settings()
@example(PackCase(config={"tp_size": 3, "cp_size": 1, "seq_align": "cp"},
                  batch=Batch((1, 2, 0))))
@given(_meta_case(configs(caps=CAPS, seq_align=st.just("cp"))))
def test_plan_seq_align_cp_matches_reference(case: PackCase) -> None:
    """seq_align='cp': every sequence aligned to cp * f only, tp on the total alone."""
    _check_meta(case)


@needs("seq_align_none")
@pytest.mark.rules("R-ALIGN-6", "R-TOTAL-2", "R-TOTAL-4", "R-META-1", "R-META-3")
@prop_settings(0.5)
@example(PackCase(config={"tp_size": 2, "cp_size": 2, "cp_layout": "contiguous",
                          "seq_align": "none"}, batch=Batch((3, 1, 0))))
@given(_meta_case(configs(caps=CAPS, seq_align=st.just("none"))))
def test_plan_seq_align_none_matches_reference(case: PackCase) -> None:
    """seq_align='none': no sequence aligned (16 rows under fp8=True), tp * cp, the bucket and
    FP8 on the total alone; contiguous layout or cp = 1."""
    _check_meta(case)


@needs("fp8_recipes")
@pytest.mark.rules("R-FP8-1", "R-TOTAL-1", "R-ALIGN-2", "R-TOTAL-2", "R-TOTAL-4")
@prop_settings()
@example(PackCase(config={"tp_size": 2, "cp_size": 1, "fp8": "mxfp8"}, batch=Batch((5, 3))))
@example(PackCase(config={"cp_size": 2, "fp8": "nvfp4", "bucket": 100}, batch=Batch((7,))))
@given(_meta_case(configs(caps=CAPS, fp8=st.sampled_from(["tensor", "mxfp8", "block", "nvfp4"]),
                          tp=st.integers(1, 4), cp=st.integers(1, 4))))
def test_plan_fp8_recipes_match_reference(case: PackCase) -> None:
    """An FP8 recipe: no per-sequence FP8 alignment, the total a multiple of tp * cp * q."""
    _check_meta(case)


@needs("tail_segment")
@pytest.mark.rules("R-TAIL-1", "R-TAIL-2", "R-META-1", "R-META-3", "R-ROW-2", "R-POS-2")
@prop_settings()
@example(PackCase(config={"bucket": 512, "tail": "segment"}, batch=Batch((513,))))
@example(PackCase(config={"cp_size": 2, "tail": "segment", "bucket": 12}, batch=Batch((3, 0))))
@example(PackCase(config={"tail": "segment"}, batch=Batch((4, 4))))  # T = S: no segment
@given(pack_cases(caps=CAPS, need_roll=False, config=configs(caps=CAPS,
                                                             tail=st.just("segment"))))
def test_tail_segment_matches_reference(case: PackCase) -> None:
    """tail='segment': the total padding T - S as segment B, its position ids from 0, its rows
    pad_value; every real sequence keeps ceil_to(L_i, A)."""
    _check_pack(case)


@needs("static_metadata")
@pytest.mark.rules("R-STATIC-1", "R-STATIC-2", "R-META-7", "R-META-1", "R-META-3", "R-ROW-2")
@prop_settings()
@example(PackCase(config={"cp_size": 2, "max_num_seqs": 4, "max_seqlen": "total"},
                  batch=Batch((3, 5))))
@given(pack_cases(caps=CAPS, need_roll=False, config=configs(caps=CAPS, static=True)))
def test_static_metadata_matches_reference(case: PackCase) -> None:
    """max_num_seqs = N: N entries, the ones past the real content zero-length at the end of
    the buffer; max_seqlen='total': plan.max_seqlen = T; num_seqs = B."""
    _check_pack(case)
