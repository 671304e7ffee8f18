"""The consumer-contract checks (conformance/contract.py) can fail: hand-built broken packs.

Each broken pack is written out by hand or built by `build` below, a literal construction of
the padded buffer and TE's partition written from spec §12a (it does not use the code under
test). Each test names the rule whose check it proves can fail, and the message it must give;
the last group shows that valid packs of other conventions pass every check.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from thd_packing.conformance import buffer as b
from thd_packing.conformance import contract as c
from thd_packing.conformance.under_test import RuleViolation, TargetError


def canonical(lengths: list[int]) -> list[np.ndarray]:
    return [np.array([1000 * (i + 1) + j for j in range(n)], dtype=np.int64)
            for i, n in enumerate(lengths)]


def build(seqs: list[np.ndarray], segments: list[int], cp: int = 1, layout: str = "zigzag", *,
          pad: Any = 0, roll: bool = False, **meta: Any) -> list[b.RankOutput]:
    """Segment k holds sequence k's tokens (labels with `roll`) then padding; extra segments are
    padding only. Position ids restart at 0 in every segment, also in padding."""
    trail, dtype = seqs[0].shape[1:], seqs[0].dtype
    rows: list[np.ndarray] = []
    pos: list[int] = []
    for k, q in enumerate(segments):
        x = seqs[k] if k < len(seqs) else np.empty((0, *trail), dtype)
        for o in range(q):
            if o < len(x) and not roll:
                rows.append(x[o])
            elif o < len(x) - 1:
                rows.append(x[o + 1])
            else:
                rows.append(np.full(trail, pad, dtype))
            pos.append(o)
    buffer = np.array(rows, dtype=dtype).reshape(len(rows), *trail)
    bounds = np.concatenate([[0], np.cumsum(segments)]).astype(np.int32)
    total, n = int(bounds[-1]), int(bounds[-1]) // cp
    out = []
    for r in range(cp):
        if cp == 1:
            idx = list(range(total))
        elif layout == "contiguous":
            idx = list(range(r * n, (r + 1) * n))
        else:
            idx = []
            for k, q in enumerate(segments):
                chunk = q // (2 * cp)
                for piece in (r, 2 * cp - 1 - r):
                    start = int(bounds[k]) + piece * chunk
                    idx += range(start, start + chunk)
        out.append(b.RankOutput(buffer[idx], np.array(pos, dtype=np.int64)[idx],
                                {"cu_seqlens_padded": bounds, "total": total, "local_rows": n,
                                 **meta}))
    return out


def fails(rule: str, message: str, seqs: list[np.ndarray], outputs: list[b.RankOutput],
          config: dict[str, Any], **kwargs: Any) -> None:
    with pytest.raises(RuleViolation, match=message) as info:
        c.check_pack(seqs, outputs, config, **kwargs)
    assert info.value.rules == {rule}


def with_rows(outputs: list[b.RankOutput], rank: int, rows: list[int]) -> list[b.RankOutput]:
    out = list(outputs)
    out[rank] = out[rank]._replace(rows=np.array(rows, dtype=np.int64))
    return out


# ----------------------------------------------------------------------------------------------
# The buffer (R-CONSUMER-1 to -5)


def test_bucket_segment_not_divisible_by_2cp() -> None:
    """R-CONSUMER-2: verl's erratum E-1 (cp 2, bucket 6, [3]): one segment of 6 rows, chunk
    1.5; the team packer and verl hold [1000, 0, 0] and [1001, 0, 0]."""
    seqs = canonical([3])
    meta = {"cu_seqlens_padded": np.array([0, 6], np.int32), "total": 6, "local_rows": 3}
    outputs = [b.RankOutput(np.array([1000, 0, 0]), np.zeros(3, np.int64), meta),
               b.RankOutput(np.array([1001, 0, 0]), np.zeros(3, np.int64), meta)]
    fails("R-CONSUMER-2", "segment 0 of cu_seqlens_padded has 6 rows, not divisible by "
          r"2 \* cp_size = 4", seqs, outputs, {"cp_size": 2, "bucket": 6})


def test_contiguous_segments_need_no_2cp() -> None:
    """R-CONSUMER-2: the same segment of 6 rows is fine for the contiguous layout."""
    seqs = canonical([3])
    c.check_pack(seqs, build(seqs, [6], 2, "contiguous"), {"cp_size": 2, "cp_layout": "contiguous"})


def test_rows_not_divisible_by_tp() -> None:
    """R-CONSUMER-4: tp 2 and 3 rows per rank (E-1's tp case)."""
    seqs = canonical([3])
    fails("R-CONSUMER-4", "3 rows, not divisible by tp_size 2", seqs, build(seqs, [3]),
          {"tp_size": 2})


def test_fp8_slice_not_divisible_by_16() -> None:
    """R-CONSUMER-5: fp8, tp 2, 16 rows per rank: 8 rows per TP slice."""
    seqs = canonical([5])
    fails("R-CONSUMER-5", "each TP slice holds 16 / 2 = 8 rows", seqs, build(seqs, [16]),
          {"tp_size": 2, "fp8": True})
    with pytest.raises(RuleViolation, match=r"each TP slice holds 24 / 16 = 1.5 rows"):
        b.check_fp8_split(build(seqs, [24]), {"tp_size": 16, "fp8": True})
    c.check_pack(seqs, build(seqs, [32]), {"tp_size": 2, "fp8": True})


@pytest.mark.parametrize(
    ("bounds", "meta", "message"),
    [
        ([1, 4], {}, "starts at 1"),
        ([0, 4, 2, 4], {}, "decreases at entry 2"),
        ([0, 4], {"total": 8}, "total 8, but cu_seqlens_padded ends at 4"),
        ([0, 4], {"total": "4"}, "total is '4', not an integer"),
    ],
)
def test_bad_boundaries(bounds: list[int], meta: dict[str, Any], message: str) -> None:
    """R-CONSUMER-1: C starts at 0, never decreases, ends at the total."""
    outputs = [b.RankOutput(np.arange(4), np.arange(4),
                            {"cu_seqlens_padded": np.array(bounds, np.int32), **meta})]
    fails("R-CONSUMER-1", message, canonical([4]), outputs, {})


def test_boundaries_differ_between_ranks_or_are_floats() -> None:
    """R-CONSUMER-1: one integer C on every rank."""
    seqs = canonical([4])
    good = build(seqs, [4], 2)
    other = [good[0], good[1]._replace(meta={**good[1].meta,
                                             "cu_seqlens_padded": np.array([0, 2, 4], np.int32)})]
    fails("R-CONSUMER-1", "differs between ranks", seqs, other, {"cp_size": 2})
    floats = [o._replace(meta={**o.meta, "cu_seqlens_padded": np.array([0.0, 4.0])})
              for o in good]
    fails("R-CONSUMER-1", "dtype float64, not an integer type", seqs, floats, {"cp_size": 2})


def test_integer_outputs_in_a_floating_dtype() -> None:
    """R-CONSUMER-16: seqlens, cu_seqlens and position ids as floats are refused, even when
    every value is integral."""
    seqs = canonical([4])
    good = build(seqs, [4], 2)
    c.check_pack(seqs, good, {"cp_size": 2})
    for key in ("seqlens", "seqlens_padded", "cu_seqlens"):
        floats = [o._replace(meta={**o.meta, key: np.array([0.0, 4.0])}) for o in good]
        fails("R-CONSUMER-16", f"{key} have dtype float64", seqs, floats, {"cp_size": 2})
    floats = [o._replace(pos=o.pos.astype(np.float32)) for o in good]
    fails("R-CONSUMER-16", "position ids have dtype float32", seqs, floats, {"cp_size": 2})


def test_rows_do_not_add_up_to_the_buffer() -> None:
    """R-CONSUMER-3: n * cp != C_K, and a local_rows that is not the rows held."""
    seqs = canonical([4])
    outputs = [o._replace(meta={**o.meta, "cu_seqlens_padded": np.array([0, 8], np.int32),
                                "total": 8}) for o in build(seqs, [4], 2)]
    fails("R-CONSUMER-3", r"2 \* cp_size 2 = 4, but cu_seqlens_padded ends at 8", seqs,
          outputs, {"cp_size": 2})
    lying = [o._replace(meta={**o.meta, "local_rows": 4}) for o in build(seqs, [4], 2)]
    fails("R-CONSUMER-3", "local_rows 4, but it holds 2 rows", seqs, lying, {"cp_size": 2})


def test_unequal_rank_row_counts() -> None:
    """R-CONSUMER-3: ranks that hold different row counts are a verdict, not a target error."""
    seqs = canonical([3, 5])
    outputs = build(seqs, [4, 8], 2)
    outputs[0] = outputs[0]._replace(rows=outputs[0].rows[:5])
    fails("R-CONSUMER-3", r"different row counts \[5, 6\]", seqs, outputs, {"cp_size": 2})


# ----------------------------------------------------------------------------------------------
# Malformed output: TargetError, no rule


@pytest.mark.parametrize(
    "fault", ["no-key", "meta-list", "rows-list", "rows-0d", "cu-2d", "rank-count", "pos-list"],
)
def test_malformed_output_is_a_target_error(fault: str) -> None:
    """A check that cannot read the output decides no rule (under_test.TargetError)."""
    seqs = canonical([3, 5])
    outputs = build(seqs, [4, 8], 2)
    o0 = outputs[0]
    if fault == "no-key":
        outputs[0] = o0._replace(meta={k: v for k, v in o0.meta.items()
                                       if k != "cu_seqlens_padded"})
    elif fault == "meta-list":
        outputs[0] = o0._replace(meta=[0, 4, 12])
    elif fault == "rows-list":
        outputs[0] = o0._replace(rows=o0.rows.tolist())
    elif fault == "rows-0d":
        outputs[0] = o0._replace(rows=np.array(5))
    elif fault == "cu-2d":
        outputs[0] = o0._replace(meta={**o0.meta, "cu_seqlens_padded": np.zeros((2, 3), int)})
    elif fault == "rank-count":
        outputs = outputs[:1]
    else:
        outputs[0] = o0._replace(pos=o0.pos.tolist())
    with pytest.raises(TargetError):
        c.check_pack(seqs, outputs, {"cp_size": 2})


# ----------------------------------------------------------------------------------------------
# Rows (R-CONSUMER-6, -7, -10, -11, -12)


def test_dropped_trailing_zero_length_sequence() -> None:
    """R-CONSUMER-7: [3, 0, 0] packed with cu_seqlens_padded [0, 3]: two sequences dropped."""
    seqs = canonical([3, 0, 0])
    fails("R-CONSUMER-7", "1 segments for 3 sequences: sequences 1..2", seqs, build(seqs, [3]),
          {})


def test_dropped_middle_zero_length_sequence_shifts_the_next() -> None:
    """R-CONSUMER-7: [2, 0, 2] with the empty one left out and a padding segment appended:
    sequence 2's tokens sit in segment 1."""
    seqs = canonical([2, 0, 2])
    outputs = build([seqs[0], seqs[2]], [2, 2, 2])
    fails("R-CONSUMER-7", r"rank 0 row 4 \(sequence 2, offset 0\): the token is at rank 0 row "
          r"2, in segment 1 \(offset 0\), not its own", seqs, outputs, {})


def test_real_tokens_in_an_extra_segment() -> None:
    """R-CONSUMER-7: B + 1 segments, sequence 1's tokens in segment 2, segment 1 padding."""
    seqs = canonical([2, 2])
    buffer = np.array([1000, 1001, 0, 0, 2000, 2001, 0, 0])
    outputs = [b.RankOutput(buffer, np.array([0, 1, 0, 1, 0, 1, 2, 3]),
                            {"cu_seqlens_padded": np.array([0, 2, 4, 8], np.int32)})]
    fails("R-CONSUMER-7", r"rank 0 row 2 \(sequence 1, offset 0\).*in segment 2", seqs,
          outputs, {})


def test_short_segment() -> None:
    """R-CONSUMER-7: a segment shorter than its sequence (offset >= the segment's length)."""
    seqs = canonical([3, 1])
    fails("R-CONSUMER-7", "segment 0 has 2 rows, sequence 0 has 3 tokens", seqs,
          build([seqs[0][:2], seqs[1]], [2, 2]), {})


def test_lost_token() -> None:
    """R-CONSUMER-7: zigzag cp 2, [3]: token 1002 on no rank."""
    seqs = canonical([3])
    outputs = with_rows(build(seqs, [4], 2), 1, [1001, 0])
    fails("R-CONSUMER-7", r"rank 1 row 1 \(sequence 0, offset 2\) does not hold token 2", seqs,
          outputs, {"cp_size": 2})


def test_wrong_dtype() -> None:
    """R-CONSUMER-7: rows in another dtype than the batch."""
    seqs = canonical([4])
    outputs = [o._replace(rows=o.rows.astype(np.int32)) for o in build(seqs, [4])]
    fails("R-CONSUMER-7", "rows int32", seqs, outputs, {})


def test_contiguous_rows_under_a_zigzag_config() -> None:
    """R-CONSUMER-6: cp 2, [4]: slices where TE expects zigzag chunks; every token is present,
    in its own segment, at the wrong slot."""
    seqs = canonical([4])
    fails("R-CONSUMER-6", r"rank 0 row 1 \(sequence 0, offset 3\): the token is at rank 1 "
          r"row 1, which TE reads as offset 2", seqs, build(seqs, [4], 2, "contiguous"),
          {"cp_size": 2})


def test_wrong_position_ids() -> None:
    """R-CONSUMER-10: real rows' position ids are their offsets."""
    seqs = canonical([3, 2])
    outputs = build(seqs, [4, 4], 2)
    outputs[1] = outputs[1]._replace(pos=np.zeros(4, np.int64))
    fails("R-CONSUMER-10", r"rank 1 row 0 \(sequence 0, offset 1\): position id 0, expected 1",
          seqs, outputs, {"cp_size": 2})
    short = [o._replace(pos=o.pos[:-1]) for o in build(seqs, [4, 4], 2)]
    fails("R-CONSUMER-10", "position ids int64", seqs, short, {"cp_size": 2})


def test_label_from_nowhere() -> None:
    """R-CONSUMER-11: verl's erratum E-3 (cp 2, [4, 0], need_roll): rank 1's label at offset 2
    is 0 instead of token 3."""
    seqs = canonical([4, 0])
    outputs = with_rows(build(seqs, [4, 0], 2, roll=True), 1, [1002, 0])
    fails("R-CONSUMER-11", r"rank 1 row 1 \(sequence 0, offset 2\): label is 0, expected token "
          "3 of sequence 0", seqs, outputs, {"cp_size": 2}, need_roll=True)


def test_label_of_another_sequence_in_padding_is_a_leak() -> None:
    """R-CONSUMER-12: verl's erratum E-4 (tp 2, [1, 2], need_roll): rows [0, 2000, 2001, 1000];
    sequence 0's padding row holds sequence 1's first token."""
    seqs = canonical([1, 2])
    meta = {"cu_seqlens_padded": np.array([0, 2, 4], np.int32)}
    outputs = [b.RankOutput(np.array([0, 2000, 2001, 1000]), np.array([1, 0, 1, 0]), meta)]
    fails("R-CONSUMER-12", r"leak \(severity: medium \(labels, need_roll\)\): rank 0 row 1 is "
          r"padding of segment 0 \(offset 1\) and holds token 0 of sequence 1", seqs, outputs,
          {"tp_size": 2}, need_roll=True)


def test_token_of_another_sequence_in_padding_is_a_leak() -> None:
    """R-CONSUMER-12 without need_roll (severity low), also in a trailing padding segment."""
    seqs = canonical([1, 2])
    outputs = with_rows(build(seqs, [2, 2, 2]), 0, [1000, 0, 2000, 2001, 0, 2001])
    fails("R-CONSUMER-12", r"leak \(severity: low \(inputs\)\): rank 0 row 5 is padding of "
          "segment 2", seqs, outputs, {})


def test_own_token_in_padding_or_the_pad_value_is_no_leak() -> None:
    """R-CONSUMER-12: a padding row with its own sequence's token, or equal to pad_value (even
    where pad_value is another sequence's token), is not a leak; nor are non-unique values."""
    seqs = canonical([1, 2])
    own = with_rows(build(seqs, [2, 2]), 0, [1000, 1000, 2000, 2001])
    c.check_pack(seqs, own, {"tp_size": 2})
    pad = build(seqs, [2, 2], pad=2001)
    c.check_pack(seqs, pad, {"tp_size": 2}, pad_value=2001)
    flags = [np.array([True]), np.array([False, True])]
    bools = build(flags, [2, 2])
    bools[0] = bools[0]._replace(rows=np.array([True, True, False, True]))
    c.check_pack(flags, bools, {"tp_size": 2})


# ----------------------------------------------------------------------------------------------
# Real boundaries (R-CONSUMER-8, -9) and unpack (R-CONSUMER-13)


@pytest.mark.parametrize(
    ("real", "message"),
    [
        ([0, 3], "cu_seqlens int32"),  # not K + 1 entries
        ([1, 4, 9], "cu_seqlens starts at 1"),
        ([0, 4, 9], "segment 0 has length 4, expected L_0 = 3"),
        ([0, 3, 8, 14], "segment 2 has length 6, expected 0 .. its padded length"),
    ],
)
def test_real_boundaries(real: list[int], message: str) -> None:
    """R-CONSUMER-8: K + 1 entries, lengths L_i, never beyond the padded segment."""
    seqs = canonical([3, 5])
    segments = [4, 8, 4] if len(real) == 4 else [4, 8]
    outputs = build(seqs, segments, 2, cu_seqlens=np.array(real, np.int32))
    fails("R-CONSUMER-8", message, seqs, outputs, {"cp_size": 2})


def test_max_seqlen_too_small() -> None:
    """R-CONSUMER-9: max_seqlen below the longest padded segment (not the longest real one)."""
    seqs = canonical([3, 5])
    fails("R-CONSUMER-9", "max_seqlen 5 < the longest padded segment 8", seqs,
          build(seqs, [4, 8], 2, max_seqlen=5), {"cp_size": 2})


def test_unpack_checks() -> None:
    """R-CONSUMER-13: a lost sequence, a wrong row, a wrong shape; a non-list is TargetError."""
    seqs = canonical([2, 3])
    c.check_unpack(seqs, [s.copy() for s in seqs])
    with pytest.raises(RuleViolation, match="2 sequences"):
        c.check_unpack(seqs + canonical([0]), seqs)
    with pytest.raises(RuleViolation, match="sequence 1 row 2: unpack gave 0"):
        c.check_unpack(seqs, [seqs[0], np.array([2000, 2001, 0])])
    with pytest.raises(RuleViolation, match=r"sequence 0: unpack gave int64\[3\]"):
        c.check_unpack(seqs, [np.arange(3), seqs[1]])
    with pytest.raises(TargetError):
        c.check_unpack(seqs, np.zeros(5))


# ----------------------------------------------------------------------------------------------
# Other conventions pass


@pytest.mark.parametrize("roll", [False, True])
def test_trailing_padding_segment_and_tp_on_the_total_pass(roll: bool) -> None:
    """Every check passes on a valid pack of another convention: tp 2, zigzag cp 2, per-sequence
    alignment 2cp = 4 only, the total padding as its own trailing segment whose position ids
    restart at 0 and which cu_seqlens declares as a pseudo-document; pad value -100."""
    seqs = canonical([3, 5, 0, 1])
    config = {"tp_size": 2, "cp_size": 2, "cp_layout": "zigzag", "fp8": False}
    segments = [4, 8, 0, 4, 8]  # sum 24: n = 6 rows per rank, divisible by tp
    real = np.array([0, 3, 8, 8, 9, 17], np.int32)
    outputs = build(seqs, segments, 2, pad=-100, roll=roll, cu_seqlens=real, max_seqlen=8)
    c.check_pack(seqs, outputs, config, need_roll=roll, pad_value=-100)


def test_fp8_and_contiguous_conventions_pass() -> None:
    """Every check passes: fp8 with 16 rows per TP slice and no per-sequence alignment at all
    (contiguous CP), the last sequence taking the total padding."""
    seqs = [np.arange(n * 2, dtype=np.float32).reshape(n, 2) + 100 * i
            for i, n in enumerate([5, 0, 7])]
    outputs = build(seqs, [5, 0, 59], 2, "contiguous", max_seqlen=59)
    c.check_pack(seqs, outputs, {"tp_size": 2, "cp_size": 2, "cp_layout": "contiguous",
                                 "fp8": True})
    shards = [o.rows for o in outputs]
    flat = np.concatenate(shards)
    c.check_unpack(seqs, [flat[0:5], flat[5:5], flat[5:12]])


# ----------------------------------------------------------------------------------------------
# Spec 1.1: FP8 recipes (R-CONSUMER-5 with R-FP8-1's quantum) and static metadata


@pytest.mark.parametrize(
    ("fp8", "rows", "ok"),
    [(True, 32, True), ("tensor", 32, True), ("mxfp8", 32, False), ("mxfp8", 64, True),
     ("block", 16, False), ("block", 32, True), ("nvfp4", 128, False), ("nvfp4", 256, True)],
)
def test_fp8_recipe_quantum(fp8: Any, rows: int, ok: bool) -> None:
    """R-CONSUMER-5: tp 2, `rows` rows per rank, so rows / 2 per TP slice: a multiple of 16 is
    enough for fp8=True and 'tensor', MXFP8 needs 32 (the tp * 16 padding that trips TE's
    divisible-by-32 assertion), block scaling 16 (TE's get_align_size_for_quantization), NVFP4
    128."""
    seqs = canonical([5])
    config = {"tp_size": 2, "fp8": fp8}
    outputs = build(seqs, [rows])
    if ok:
        c.check_pack(seqs, outputs, config)
        return
    q = {"mxfp8": 32, "block": 16, "nvfp4": 128}[fp8]
    fails("R-CONSUMER-5", rf"fp8={fp8!r}: each TP slice holds {rows} / 2 = {rows // 2} rows, "
          f"not a multiple of {q}", seqs, outputs, config)


def test_fp8_recipe_per_rank_with_cp() -> None:
    """R-CONSUMER-5 counts one rank's rows (n = total / cp): cp 2, tp 1, mxfp8, total 32 is 16
    rows per rank, not a multiple of 32; total 64 passes."""
    seqs = canonical([3, 5])
    config = {"cp_size": 2, "fp8": "mxfp8"}
    fails("R-CONSUMER-5", r"each TP slice holds 16 / 1 = 16 rows, not a multiple of 32", seqs,
          build(seqs, [4, 28], 2), config)
    c.check_pack(seqs, build(seqs, [4, 60], 2), config)


@pytest.mark.parametrize("tail", ["last", "segment"])
@pytest.mark.parametrize("cp", [1, 2])
def test_static_metadata_passes(tail: str, cp: int) -> None:
    """Static metadata (R-STATIC-1, -2) meets every consumer rule: max_num_seqs 6 for 3
    sequences, the entries past the real content zero-length at the end of the buffer (under
    'segment' entry 3 is the padding segment), real cu_seqlens with the same zero-length
    entries, max_seqlen = the total."""
    seqs = canonical([3, 0, 5])
    if tail == "last":
        segments, real = [4, 0, 12, 0, 0, 0], [0, 3, 3, 8, 8, 8, 8]
    else:
        segments, real = [4, 0, 8, 4, 0, 0], [0, 3, 3, 8, 8, 8, 8]
    outputs = build(seqs, segments, cp, cu_seqlens=np.array(real, np.int32), max_seqlen=16)
    c.check_pack(seqs, outputs, {"cp_size": cp})
    shards = np.concatenate([o.rows for o in outputs]) if cp == 1 else None
    if shards is not None:
        c.check_unpack(seqs, [shards[0:3], shards[4:4], shards[4:9]])


def test_static_entry_with_real_rows_fails() -> None:
    """R-CONSUMER-8: an entry past the B real sequences whose real length is not within its
    padded segment (a real length of 1 in a zero-length static entry)."""
    seqs = canonical([3, 5])
    outputs = build(seqs, [4, 8, 0, 0], 2, cu_seqlens=np.array([0, 3, 8, 9, 9], np.int32))
    fails("R-CONSUMER-8", r"segment 2 has length 1, expected 0 .. its padded length \(padded "
          r"segment 0\)", seqs, outputs, {"cp_size": 2})


def test_static_entries_before_a_sequence_fail() -> None:
    """R-CONSUMER-7: zero-length entries must come after the real content: [3, 5] with the
    static entries between them leaves segment 1 (sequence 1's) empty."""
    seqs = canonical([3, 5])
    outputs = build([seqs[0], seqs[1][:0], seqs[1][:0], seqs[1]], [4, 0, 0, 8])
    fails("R-CONSUMER-7", "segment 1 has 0 rows, sequence 1 has 5 tokens", seqs, outputs, {})


def test_padding_segment_not_divisible_by_2cp() -> None:
    """R-CONSUMER-2: a trailing padding segment is a segment like any other: zigzag cp 2, [3]
    as [4] plus a padding segment of 2 rows (total 6), which TE cannot cut into 4 chunks."""
    seqs = canonical([3])
    meta = {"cu_seqlens_padded": np.array([0, 4, 6], np.int32), "total": 6, "local_rows": 3}
    outputs = [b.RankOutput(np.array([1000, 1003, 0]), np.array([0, 3, 0]), meta),
               b.RankOutput(np.array([1001, 1002, 0]), np.array([1, 2, 1]), meta)]
    fails("R-CONSUMER-2", "segment 1 of cu_seqlens_padded has 2 rows, not divisible by "
          r"2 \* cp_size = 4", seqs, outputs, {"cp_size": 2})


# ----------------------------------------------------------------------------------------------
# Spec 1.2: position-id boundaries (R-PID-2), labels beside the inputs (R-CONSUMER-15), the
# zero-length-omitted convention (R-CONSUMER-14)


def test_ring_pack_without_sequence_alignment_passes() -> None:
    """seq_align='none' under ring attention: cp 2 contiguous, [1, 1] as [0, 1, 2]."""
    seqs = canonical([1, 1])
    c.check_pack(seqs, build(seqs, [1, 1], 2, "contiguous"),
                 {"cp_size": 2, "cp_layout": "contiguous"})


def test_padding_id_minus_one_glues_padding_to_the_next_sequence() -> None:
    """R-PID-2: [2, 3] as [3, 3] with the padding row of segment 0 at position id -1: derived
    from position ids, sequence 1 starts one row early and attends to that row."""
    seqs = canonical([2, 3])
    outputs = build(seqs, [3, 3])
    ids = outputs[0].pos.copy()
    ids[2] = -1
    fails("R-PID-2", "sequence 1 .* starts at buffer row 3, but its position id 0 follows",
          seqs, [outputs[0]._replace(pos=ids)], {})


def test_position_ids_restarting_inside_a_sequence_fail_pid_not_before() -> None:
    """R-PID-2 holds where R-CONSUMER-10 does: a restart inside a sequence is R-CONSUMER-10
    first (the real offset is wrong), checked alone it is R-PID-2."""
    seqs = canonical([4])
    outputs = build(seqs, [4])
    ids = np.array([0, 1, 0, 1])
    with pytest.raises(RuleViolation, match="inside it at buffer row 2") as info:
        c.check_position_boundaries(seqs, [outputs[0]._replace(pos=ids)],
                                    b.check_buffer(outputs, {}))
    assert info.value.rules == {"R-PID-2"}


def test_ignored_labels_pass_and_a_pad_value_label_fails() -> None:
    """R-CONSUMER-15: labels='ignore' wants ignore_index on padding and on each last token;
    the roll's pad_value there (0) is a violation, and -100 is no leak (R-CONSUMER-12)."""
    seqs = canonical([3, 2])
    config = {"labels": "ignore", "tp_size": 2}
    good = build(seqs, [4, 2], pad=-100, roll=True)
    c.check_pack(seqs, good, config, need_roll=True)
    bad = build(seqs, [4, 2], pad=0, roll=True)
    fails("R-CONSUMER-15", r"row 2 \(segment 0, offset 2, its last real token\) holds 0",
          seqs, bad, config, need_roll=True)
    c.check_pack(seqs, bad, {"tp_size": 2}, need_roll=True)  # labels='roll': free there


def test_omitted_zero_length_sequences_pass_only_when_declared() -> None:
    """R-CONSUMER-14: [2, 0, 3] with the empty sequence left out of the metadata (transformers'
    DataCollatorWithFlattening) passes under zero_length='omit' and fails R-CONSUMER-7 when the
    target keeps them (segment 1 would be sequence 1's)."""
    seqs = canonical([2, 0, 3])
    outputs = build([seqs[0], seqs[2]], [2, 3], cu_seqlens=np.array([0, 2, 5], np.int32))
    c.check_pack(seqs, outputs, {}, zero_length="omit")
    with pytest.raises(RuleViolation) as info:
        c.check_pack(seqs, outputs, {})
    assert info.value.rules == {"R-CONSUMER-8"} or info.value.rules == {"R-CONSUMER-7"}


def test_pack_without_position_ids_is_judged_on_its_rows() -> None:
    """A packer that gives no position ids (Packed.position_ids None) is not a target error:
    the pack rules that need no ids still run, and still fail on a misplaced token."""
    seqs = canonical([3, 0, 1])
    good = [b.RankOutput(o.rows, None, o.meta) for o in build(seqs, [4, 0, 4], 2)]
    c.check_pack(seqs, good, {"cp_size": 2})
    bad = [b.RankOutput(o.rows.copy(), None, o.meta) for o in good]
    bad[0].rows[0] = 9
    with pytest.raises(RuleViolation, match="R-CONSUMER"):
        c.check_pack(seqs, bad, {"cp_size": 2})
