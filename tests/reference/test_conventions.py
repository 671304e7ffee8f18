"""The reference under spec 1.1's conventions: tail, seq_align and the FP8 recipes.

The oracles are written from the spec text, independently of reference/ (nothing of
reference/alignment.py, segments.py or rowmap.py is imported): the total is found by brute force,
scanning totals upward from S and taking the first that meets every requirement of the
convention, each requirement stated as what its consumer needs; the zigzag shard is
TransformerEngine's per-token formula of `thd_get_partitioned_indices`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thd_packing import reference as ref

FAST = settings(
    max_examples=80,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# TE's get_align_size_for_quantization, per recipe (R-FP8-1); True is tensor scaling.
QUANTUM = {True: 16, "tensor": 16, "mxfp8": 32, "block": 16, "nvfp4": 128}
FP8_VALUES: list[bool | str] = [False, True, "tensor", "mxfp8", "block", "nvfp4"]


class Conv(NamedTuple):
    tp: int
    cp: int
    layout: str
    fp8: bool | str
    bucket: int | None
    mlr: int | None
    tail: str
    seq_align: str

    def build(self, **extra: Any) -> ref.PackConfig:
        return ref.PackConfig(tp_size=self.tp, cp_size=self.cp, cp_layout=self.layout,
                              fp8=self.fp8, bucket=self.bucket, min_local_rows=self.mlr,
                              tail=self.tail, seq_align=self.seq_align, **extra)


def round_up(x: int, a: int) -> int:
    return -(-x // a) * a


def per_segment_alignment(c: Conv) -> int:
    """R-ALIGN-1, R-ALIGN-5, R-ALIGN-2 read from the spec: what every segment's length needs."""
    f = 2 if c.layout == "zigzag" and c.cp > 1 else 1
    base = c.tp * c.cp * f if c.seq_align == "tp_cp" else c.cp * f
    return math.lcm(16, base) if c.fp8 is True else base


def meets_every_requirement(t: int, s: int, c: Conv) -> bool:
    """Each requirement of spec §3 as its consumer states it, for a candidate total `t`."""
    a = per_segment_alignment(c)
    f = 2 if c.layout == "zigzag" and c.cp > 1 else 1
    if t < s:
        return False  # no sequence loses rows
    if (t - s) % a:
        return False  # the segment carrying T - S (last sequence or padding segment) stays aligned
    if c.bucket is not None and t % c.bucket:
        return False  # the bucket
    if c.mlr is not None and t < c.cp * c.mlr:
        return False  # every rank gets min_local_rows
    if t % c.cp or (t // c.cp) % c.tp:
        return False  # equal ranks, local rows split by sequence parallelism
    if c.fp8 is True and t % (128 * c.tp * c.cp * f):
        return False  # verl's use_fp8_padding: total a multiple of 128 * A0
    if c.fp8 not in (False, True) and (t // (c.cp * c.tp)) % QUANTUM[c.fp8]:
        return False  # one TP slice of one rank reaches the GEMM: divisible by q
    return True


def brute_force_total(lengths: list[int], c: Conv) -> int:
    a = per_segment_alignment(c)
    s = sum(round_up(n, a) for n in lengths)
    t = s
    while not meets_every_requirement(t, s, c):
        t += 1
    return t


def te_rows(padded: list[int], cp: int, layout: str, rank: int) -> list[int]:
    """The global rows rank `rank` holds: TE's per-token zigzag formula, or a slice."""
    cu = [0]
    for p in padded:
        cu.append(cu[-1] + p)
    local = cu[-1] // cp
    if cp == 1:
        return list(range(cu[-1]))
    if layout == "contiguous":
        return list(range(rank * local, (rank + 1) * local))
    out = []
    for t in range(local):
        seq = next(i for i in range(len(padded)) if cu[i] // cp <= t < cu[i + 1] // cp)
        half = padded[seq] // cp // 2
        index = t - cu[seq] // cp
        index += rank * half if index < half else (2 * cp - rank - 2) * half
        out.append(cu[seq] + index)
    return out


def source_of(padded: list[int], g: int) -> tuple[int, int]:
    start = 0
    for k, p in enumerate(padded):
        if start <= g < start + p:
            return k, g - start
        start += p
    raise AssertionError(g)


@st.composite
def conventions(draw: st.DrawFn) -> Conv:
    c = Conv(tp=draw(st.integers(1, 4)), cp=draw(st.integers(1, 4)),
             layout=draw(st.sampled_from(["zigzag", "contiguous"])),
             fp8=draw(st.sampled_from(FP8_VALUES)),
             bucket=draw(st.none() | st.integers(1, 48) | st.sampled_from([100, 512])),
             mlr=draw(st.none() | st.integers(1, 40)),
             tail=draw(st.sampled_from(["last", "segment"])),
             seq_align=draw(st.sampled_from(["tp_cp", "cp"])))
    return c


LENGTHS = st.lists(st.integers(0, 40) | st.integers(0, 2), min_size=1, max_size=6)


@FAST
@given(c=conventions(), lengths=LENGTHS)
def test_total_is_smallest_meeting_requirements(c: Conv, lengths: list[int]) -> None:
    """R-TOTAL-2, R-TOTAL-4, R-ALIGN-5, R-FP8-1: under every convention the total is the first
    total at or above S that meets every requirement (brute force)."""
    assert ref.plan_thd(lengths, c.build()).total == brute_force_total(lengths, c)


@FAST
@given(c=conventions(), lengths=LENGTHS)
def test_segments_per_tail(c: Conv, lengths: list[int]) -> None:
    """R-ALIGN-3, R-TOTAL-5, R-TAIL-1, R-META-1..3, R-META-7: every sequence keeps
    ceil_to(L_i, A); T - S goes onto the last sequence (tail="last") or into its own segment
    B with L = 0, present only when T > S (tail="segment")."""
    plan = ref.plan_thd(lengths, c.build())
    a = per_segment_alignment(c)
    padded = [round_up(n, a) for n in lengths]
    t = brute_force_total(lengths, c)
    if c.tail == "last":
        padded[-1] += t - sum(padded)
        seqlens = list(lengths)
    else:
        seqlens = list(lengths) + ([0] if t > sum(padded) else [])
        padded += [t - sum(padded)] if t > sum(padded) else []
    assert plan.num_seqs == plan.batch_size == len(lengths)
    assert plan.seqlens.tolist() == seqlens
    assert plan.seqlens_padded.tolist() == padded
    assert plan.cu_seqlens.tolist() == np.concatenate([[0], np.cumsum(seqlens)]).tolist()
    assert plan.cu_seqlens_padded.tolist() == np.concatenate([[0], np.cumsum(padded)]).tolist()
    assert plan.max_seqlen == max(padded)
    assert all(p % a == 0 for p in padded)
    if c.layout == "zigzag" and c.cp > 1:
        assert all(p % (2 * c.cp) == 0 for p in padded)  # the padding segment splits too


def _unique(lengths: list[int]) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.int64) + (i + 1) * 10**6 for i, n in enumerate(lengths)]


@FAST
@given(c=conventions(), lengths=LENGTHS, roll=st.booleans())
def test_rows_and_positions_per_tail(c: Conv, lengths: list[int], roll: bool) -> None:
    """R-SHARD-2, R-SHARD-3, R-ROW-1, R-ROW-2, R-POS-2, R-TAIL-2, R-ROLL-1, R-ROLL-3: rows
    follow TE's partition of the K segments; the padding segment's rows hold pad_value and,
    without need_roll, the position id of their offset (specified); with need_roll unspecified."""
    config = c.build()
    seqs = _unique(lengths)
    plan = ref.plan_thd(lengths, config)
    padded = plan.seqlens_padded.tolist()
    for rank in range(c.cp):
        rows, pos, _ = ref.pack_thd(seqs, config, rank, need_roll=roll, pad_value=-9)
        rows_spec, pos_spec = ref.specified_slots(plan, config, rank, roll)
        for k, g in enumerate(te_rows(padded, c.cp, c.layout, rank)):
            seq, off = source_of(padded, g)
            in_pad_segment = seq >= len(lengths)
            if in_pad_segment:
                assert c.tail == "segment" and rows[k] == -9  # R-TAIL-1, R-ROW-2
                assert pos_spec[k] == (not roll)  # R-TAIL-2, R-ROLL-3
                if not roll:
                    assert pos[k] == off  # R-TAIL-2: restarts at 0
            elif off >= lengths[seq]:
                assert rows[k] == -9 and not pos_spec[k]  # R-ROW-2, R-POS-3
            elif not roll:
                assert rows[k] == seqs[seq][off] and pos[k] == off and pos_spec[k]
            elif off < lengths[seq] - 1:
                assert rows[k] == seqs[seq][off + 1] and pos[k] == off + 1  # R-ROLL-1
            else:
                assert not rows_spec[k] and not pos_spec[k]  # R-ROLL-2


@FAST
@given(c=conventions(), lengths=LENGTHS)
def test_unpack_returns_the_batch(c: Conv, lengths: list[int]) -> None:
    """R-UNPACK-1, R-UNPACK-2, R-META-7: unpack returns num_seqs arrays, the padding segment
    contributing nothing."""
    config = c.build()
    seqs = _unique(lengths)
    shards = [ref.pack_thd(seqs, config, r)[0] for r in range(c.cp)]
    out = ref.unpack_thd(shards, ref.plan_thd(lengths, config), config)
    assert len(out) == len(seqs)
    assert all(np.array_equal(a, b) for a, b in zip(out, seqs, strict=True))


@FAST
@given(c=conventions(), lengths=LENGTHS)
def test_defaults_are_1_0(c: Conv, lengths: list[int]) -> None:
    """R-IN-3: tail="last", seq_align="tp_cp", fp8 a bool: the plan a 1.0 config gives, built
    with the 1.0 fields only (explicit defaults change nothing)."""
    fp8 = c.fp8 is True
    old = ref.PackConfig(tp_size=c.tp, cp_size=c.cp, cp_layout=c.layout, fp8=fp8,
                         bucket=c.bucket, min_local_rows=c.mlr)
    new = c._replace(fp8=fp8, tail="last", seq_align="tp_cp").build(max_num_seqs=None,
                                                                    max_seqlen="exact")
    assert old == new
    a, b = ref.plan_thd(lengths, old), ref.plan_thd(lengths, new)
    assert a.seqlens_padded.tolist() == b.seqlens_padded.tolist() and a.total == b.total


def test_recipe_quantum_and_alignments() -> None:
    """R-FP8-1, R-ALIGN-2, R-TOTAL-1, R-TOTAL-2, R-CONSUMER-5: tp=2, cp=2 zigzag, per recipe."""
    # (fp8, seq_align) -> (q, A, F, M); A0 = 8, As = 8 ("tp_cp") or 4 ("cp").
    table: dict[tuple[bool | str, str], tuple[int | None, int, int | None, int]] = {
        (False, "tp_cp"): (None, 8, None, 8),
        (True, "tp_cp"): (16, 16, 1024, 1024),
        (True, "cp"): (16, 16, 1024, 1024),
        ("tensor", "tp_cp"): (16, 8, 64, 64),
        ("tensor", "cp"): (16, 4, 64, 64),
        ("mxfp8", "cp"): (32, 4, 128, 128),
        ("block", "cp"): (16, 4, 64, 64),
        ("nvfp4", "tp_cp"): (128, 8, 512, 512),
        (False, "cp"): (None, 4, None, 4),
    }
    for (fp8, seq_align), (q, a, f, m) in table.items():
        config = ref.PackConfig(tp_size=2, cp_size=2, fp8=fp8, seq_align=seq_align)
        got = (config.fp8_quantum, config.sequence_align, config.fp8_total_align,
               config.total_modulus)
        assert got == (q, a, f, m), (fp8, seq_align, got)
        plan = ref.plan_thd([1], config)
        if q is not None:
            assert (plan.local_rows // 2) % q == 0  # R-CONSUMER-5


def test_seq_align_cp_pads_less() -> None:
    """R-ALIGN-5, R-TOTAL-2: tp=4, cp=2 zigzag, [5, 5]: "tp_cp" pads each to 16 (T = 32),
    "cp" to a multiple of 2 * cp = 4 (8 each) with the total a multiple of tp * cp = 8 (T = 16)."""
    tp_cp = ref.plan_thd([5, 5], ref.PackConfig(tp_size=4, cp_size=2))
    cp = ref.plan_thd([5, 5], ref.PackConfig(tp_size=4, cp_size=2, seq_align="cp"))
    assert tp_cp.seqlens_padded.tolist() == [16, 16] and tp_cp.total == 32
    assert cp.seqlens_padded.tolist() == [8, 8] and cp.total == 16
    assert cp.local_rows % 4 == 0
