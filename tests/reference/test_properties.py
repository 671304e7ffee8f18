"""Property tests of the NumPy reference against every guarantee of spec/thd-packing.md.

The oracles here are written from the spec text, independently of reference/ (no helper of
reference/alignment.py or reference/rowmap.py is imported): the total is found by brute force over
the requirements of spec section 3, the zigzag shard by TransformerEngine's per-token formula of
`thd_get_partitioned_indices`. Every test names the rule IDs it checks in its docstring.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thd_packing import reference as ref

INT32_MAX = 2**31 - 1
LAYOUTS = ("zigzag", "contiguous")

# Deterministic (CI), small example counts: the reference is slow on purpose.
FAST = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MEDIUM = settings(FAST, max_examples=120)


# ---------------------------------------------------------------------------------------------
# Independent oracles, written from the spec text.
# ---------------------------------------------------------------------------------------------


class Cfg(NamedTuple):
    tp: int
    cp: int
    layout: str
    fp8: bool
    bucket: int | None
    mlr: int | None

    def build(self) -> ref.PackConfig:
        return ref.PackConfig(
            tp_size=self.tp,
            cp_size=self.cp,
            cp_layout=self.layout,
            fp8=self.fp8,
            bucket=self.bucket,
            min_local_rows=self.mlr,
        )


def round_up(x: int, a: int) -> int:
    """Spec section 0, `ceil_to`: the smallest multiple of `a` that is >= `x`."""
    return -(-x // a) * a


def spec_alignments(cfg: Cfg) -> tuple[int, int, int | None]:
    """R-ALIGN-1, R-ALIGN-2, R-TOTAL-1: (A0, A, F)."""
    two = 2 if (cfg.layout == "zigzag" and cfg.cp > 1) else 1
    a0 = cfg.tp * cfg.cp * two
    a = math.lcm(16, a0) if cfg.fp8 else a0
    return a0, a, (128 * a0 if cfg.fp8 else None)


def requirements_hold(t: np.ndarray, lengths: list[int], cfg: Cfg) -> np.ndarray:
    """R-TOTAL-2..5, R-META-5 as requirements (a)-(d) of spec section 3, vectorised over `t`."""
    _, a, f = spec_alignments(cfg)
    padded = [round_up(n, a) for n in lengths]
    s = sum(padded)
    s_rest = sum(padded[:-1])
    ok = t >= s  # the last sequence keeps at least its own aligned length
    if cfg.mlr is not None:
        ok &= t >= cfg.cp * cfg.mlr  # (c)
    if cfg.bucket is not None:
        ok &= t % cfg.bucket == 0  # (b)
    if f is not None:
        ok &= t % f == 0  # (b), FP8
    ok &= (t - s_rest) % a == 0  # (a), for the last sequence after R-TOTAL-5
    ok &= (t % cfg.cp == 0) & ((t // cfg.cp) % cfg.tp == 0)  # (d)
    return ok


def brute_force_total(lengths: list[int], cfg: Cfg) -> int:
    """The smallest total meeting every requirement, by scanning upward from S (R-TOTAL-4)."""
    _, a, _ = spec_alignments(cfg)
    start = sum(round_up(n, a) for n in lengths)
    width = 1 << 16
    while True:
        candidates = np.arange(start, start + width, dtype=np.int64)
        hits = np.flatnonzero(requirements_hold(candidates, lengths, cfg))
        if hits.size:
            return int(candidates[hits[0]])
        start += width
        width = min(width * 2, 1 << 22)


def expected_padded(lengths: list[int], cfg: Cfg) -> tuple[list[int], int]:
    """R-ALIGN-3 then R-TOTAL-5: (P_i, T) from the brute-force total."""
    _, a, _ = spec_alignments(cfg)
    padded = [round_up(n, a) for n in lengths]
    total = brute_force_total(lengths, cfg)
    padded[-1] += total - sum(padded)
    return padded, total


def global_source(padded: list[int], g: int) -> tuple[int, int]:
    """R-META-6: global row `g` of the padded buffer belongs to (sequence, offset)."""
    start = 0
    for i, p in enumerate(padded):
        if start <= g < start + p:
            return i, g - start
        start += p
    raise AssertionError(f"global row {g} beyond the buffer")


def te_partitioned_indices(padded: list[int], cp: int, rank: int) -> list[int]:
    """R-SHARD-2: TransformerEngine's `thd_get_partitioned_indices`, token by token.

    For local token `t`: find the sequence whose local span `[cu[i]/cp, cu[i+1]/cp)` holds it;
    the first half of that span is chunk `rank`, the second half chunk `2cp-1-rank`.
    """
    cu = [0]
    for p in padded:
        cu.append(cu[-1] + p)
    out = []
    for t in range(cu[-1] // cp):
        seq = next(i for i in range(len(padded)) if cu[i] // cp <= t < cu[i + 1] // cp)
        local_len = padded[seq] // cp
        half = local_len // 2
        index = t - cu[seq] // cp
        if index < half:
            index += rank * half
        else:
            index += (2 * cp - rank - 2) * half
        out.append(cu[seq] + index)
    return out


def expected_global_rows(padded: list[int], cfg: Cfg, rank: int) -> list[int]:
    """R-SHARD-1..3: the global row held at each local row of `rank`."""
    total = sum(padded)
    local = total // cfg.cp
    if cfg.cp == 1:
        return list(range(total))  # R-SHARD-1
    if cfg.layout == "contiguous":
        return list(range(rank * local, (rank + 1) * local))  # R-SHARD-3
    return te_partitioned_indices(padded, cfg.cp, rank)  # R-SHARD-2


def expected_sources(lengths: list[int], padded: list[int], cfg: Cfg, rank: int) -> list[tuple]:
    """(sequence, offset, real) for every local row of `rank`, from the spec alone."""
    out = []
    for g in expected_global_rows(padded, cfg, rank):
        i, j = global_source(padded, g)
        out.append((i, j, j < lengths[i]))
    return out


# ---------------------------------------------------------------------------------------------
# Strategies.
# ---------------------------------------------------------------------------------------------

LENGTH = st.integers(0, 40) | st.integers(0, 2) | st.integers(41, 400)
LENGTHS = st.lists(LENGTH, min_size=1, max_size=12)
BUCKET = st.none() | st.integers(1, 100) | st.integers(1, 4).map(lambda k: 512 * k - 3)
MLR = st.none() | st.integers(1, 40) | st.integers(41, 700)


@st.composite
def configs(
    draw: st.DrawFn, max_work: int | None = None, max_modulus: int = 1 << 20
) -> Cfg:
    """Every config shape: tp, cp 1..8 (non-powers of two), both layouts, FP8, odd buckets."""
    cfg = Cfg(
        tp=draw(st.integers(1, 8)),
        cp=draw(st.integers(1, 8)),
        layout=draw(st.sampled_from(LAYOUTS)),
        fp8=draw(st.booleans()),
        bucket=draw(BUCKET),
        mlr=draw(MLR),
    )
    if _modulus(cfg) > max_modulus:  # keep the brute-force scans small
        cfg = cfg._replace(bucket=None)
    if max_work is not None:
        # Keep packs cheap: shed the costliest total-level stages first.
        for field in ("bucket", "mlr", "fp8"):
            if _modulus(cfg) * cfg.cp + (cfg.mlr or 0) * cfg.cp * cfg.cp <= max_work:
                break
            shed: dict[str, Any] = {field: False if field == "fp8" else None}
            cfg = cfg._replace(**shed)
    return cfg


def _modulus(cfg: Cfg) -> int:
    """R-TOTAL-2, only to bound test cost."""
    _, a, f = spec_alignments(cfg)
    return math.lcm(a, cfg.bucket or 1, f or 1)


PACK_CONFIGS = configs(max_work=60_000)

DTYPES = st.sampled_from(["int64", "int32", "int8", "uint8", "float32", "float16", "bool"])
TRAILS = st.sampled_from([(), (), (1,), (3,), (2, 2)])


def unique_batch(lengths: list[int], trail: tuple[int, ...] = ()) -> list[np.ndarray]:
    """int64 arrays whose every element names its source: (i + 1) * 2**32 + flat index."""
    width = math.prod(trail)
    return [
        (np.arange(n * width, dtype=np.int64) + (i + 1) * 2**32).reshape((n, *trail))
        for i, n in enumerate(lengths)
    ]


def random_batch(
    lengths: list[int], trail: tuple[int, ...], dtype: str, seed: int
) -> list[np.ndarray]:
    """Arbitrary bit patterns of `dtype` (NaNs, -0.0 and extremes included for floats)."""
    rng = np.random.default_rng(seed)
    itemsize = np.dtype(dtype).itemsize
    out = []
    for n in lengths:
        shape = (n, *trail)
        if dtype == "bool":
            out.append(rng.integers(0, 2, size=shape).astype(bool))
        else:
            raw = rng.integers(0, 256, size=(math.prod(shape) * itemsize,), dtype=np.uint8)
            out.append(raw.view(dtype).reshape(shape))
    return out


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def pad_row(pad_value: Any, trail: tuple[int, ...], dtype: Any) -> np.ndarray:
    """R-IN-5, R-ROW-2: `pad_value` stored (rounded) in the dtype, in every trailing element."""
    return np.full(trail, pad_value, dtype=dtype)


def pack_all(seqs: list[np.ndarray], config: ref.PackConfig, **kwargs: Any) -> list[tuple]:
    return [ref.pack_thd(seqs, config, r, **kwargs) for r in range(config.cp_size)]


# ---------------------------------------------------------------------------------------------
# Config and plan.
# ---------------------------------------------------------------------------------------------


@FAST
@given(cfg=configs())
def test_config_alignments(cfg: Cfg) -> None:
    """R-IN-3, R-ALIGN-1, R-ALIGN-2, R-TOTAL-1, R-TOTAL-2: derived alignments of a PackConfig."""
    config = cfg.build()
    a0, a, f = spec_alignments(cfg)
    assert config.sequence_align == a
    assert config.fp8_total_align == f
    assert config.total_modulus == math.lcm(a, cfg.bucket or 1, f or 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.tp_size = 2  # type: ignore[misc]


@MEDIUM
@given(cfg=configs(), lengths=LENGTHS)
def test_plan_metadata(cfg: Cfg, lengths: list[int]) -> None:
    """R-ALIGN-3, R-TOTAL-5, R-META-1..5: every field of the plan, types included."""
    plan = ref.plan_thd(lengths, cfg.build())
    padded, total = expected_padded(lengths, cfg)
    _, a, _ = spec_alignments(cfg)
    for name in ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded"):
        array = getattr(plan, name)
        assert isinstance(array, np.ndarray) and array.dtype == np.int32, name  # R-META-1..3
    for name in ("max_seqlen", "total", "local_rows"):
        assert type(getattr(plan, name)) is int, name  # R-META-4, R-META-5
    assert plan.seqlens.tolist() == lengths  # R-META-1
    assert plan.seqlens_padded.tolist() == padded  # R-META-1, R-ALIGN-3, R-TOTAL-5
    assert all(p % a == 0 for p in plan.seqlens_padded.tolist())  # R-ALIGN-3 (last included)
    assert all(p >= n for p, n in zip(padded, lengths, strict=True))
    assert plan.cu_seqlens.tolist() == [sum(lengths[:i]) for i in range(len(lengths) + 1)]
    assert plan.cu_seqlens_padded.tolist() == [sum(padded[:i]) for i in range(len(padded) + 1)]
    assert plan.cu_seqlens_padded[-1] == plan.total == total  # R-META-3, R-META-5
    assert plan.max_seqlen == max(padded)  # R-META-4
    assert plan.local_rows * cfg.cp == plan.total  # R-META-5
    assert plan.local_rows % cfg.tp == 0  # R-META-5
    # R-TOTAL-5: only the last sequence takes the total-level rows.
    assert plan.seqlens_padded[:-1].tolist() == [round_up(n, a) for n in lengths[:-1]]


@MEDIUM
@given(cfg=configs(), lengths=LENGTHS)
def test_total_is_smallest_meeting_requirements(cfg: Cfg, lengths: list[int]) -> None:
    """R-TOTAL-2, R-TOTAL-3, R-TOTAL-4, R-META-5: T meets (a)-(d) and every t in [S, T) fails."""
    plan = ref.plan_thd(lengths, cfg.build())
    _, a, _ = spec_alignments(cfg)
    start = sum(round_up(n, a) for n in lengths)
    candidates = np.arange(start, plan.total + 1, dtype=np.int64)
    ok = requirements_hold(candidates, lengths, cfg)
    assert ok[-1], "the total misses a requirement"
    assert not ok[:-1].any(), f"smaller total {int(candidates[np.argmax(ok)])} also qualifies"


@FAST
@given(
    cfg=configs(),
    lengths=st.lists(st.integers(0, 2**26) | st.integers(0, 5), min_size=1, max_size=12),
)
def test_plan_long_lengths(cfg: Cfg, lengths: list[int]) -> None:
    """R-TOTAL-4, R-TOTAL-6, R-ERR-8: long sequences either plan to the spec total or raise."""
    config = cfg.build()
    _, a, f = spec_alignments(cfg)
    n = max(sum(round_up(x, a) for x in lengths), cfg.cp * (cfg.mlr or 0))
    expected = round_up(n, math.lcm(a, cfg.bucket or 1, f or 1))  # R-TOTAL-2..4 as written
    if expected > INT32_MAX:
        with pytest.raises(ValueError):
            ref.plan_thd(lengths, config)
        return
    plan = ref.plan_thd(lengths, config)
    assert plan.total == expected
    assert plan.cu_seqlens_padded.tolist()[-1] == expected


def test_plan_int32_boundary() -> None:
    """R-TOTAL-6, R-ERR-8: INT32_MAX itself fits; one more row, or alignment past it, raises."""
    assert ref.plan_thd([INT32_MAX], ref.PackConfig()).total == INT32_MAX
    assert ref.plan_thd([INT32_MAX - 5, 0, 5], ref.PackConfig()).total == INT32_MAX
    for lengths, config in [
        ([2**30, 2**30], ref.PackConfig()),  # E-8's counterexample
        ([INT32_MAX - 5, 6], ref.PackConfig()),
        ([INT32_MAX], ref.PackConfig(tp_size=2)),  # alignment pushes past INT32_MAX
        ([1], ref.PackConfig(cp_size=2, min_local_rows=2**30)),
        ([1], ref.PackConfig(bucket=2**31)),
        ([INT32_MAX + 1], ref.PackConfig()),  # a length beyond int32
        ([2**40], ref.PackConfig()),
    ]:
        with pytest.raises(ValueError):
            ref.plan_thd(lengths, config)


@FAST
@given(cfg=configs(), lengths=LENGTHS)
def test_plan_accepts_integer_kinds(cfg: Cfg, lengths: list[int]) -> None:
    """R-IN-1, R-META-1: lists, tuples, int arrays and NumPy integer scalars give one plan."""
    config = cfg.build()
    base = ref.plan_thd(lengths, config)
    for form in (
        tuple(lengths),
        np.array(lengths, dtype=np.int64),
        np.array(lengths, dtype=np.int32),
        [np.int16(n) if n < 2**15 else np.int64(n) for n in lengths],
    ):
        other = ref.plan_thd(form, config)
        for field in dataclasses.fields(base):
            a, b = getattr(base, field.name), getattr(other, field.name)
            if isinstance(a, np.ndarray):
                assert same_bits(a, b), field.name
            else:
                assert type(b) is int and a == b, field.name


# ---------------------------------------------------------------------------------------------
# Sharding and row contents.
# ---------------------------------------------------------------------------------------------


@MEDIUM
@given(cfg=PACK_CONFIGS, lengths=LENGTHS)
def test_row_map_matches_spec_layout(cfg: Cfg, lengths: list[int]) -> None:
    """R-SHARD-1, R-SHARD-2, R-SHARD-3, R-META-6: row_map equals the spec's (TE's) formula."""
    config = cfg.build()
    plan = ref.plan_thd(lengths, config)
    padded, _ = expected_padded(lengths, cfg)
    for rank in range(cfg.cp):
        got = [tuple(s) for s in ref.row_map(plan, config, rank)]
        assert got == expected_sources(lengths, padded, cfg, rank), f"rank {rank}"


@MEDIUM
@given(cfg=PACK_CONFIGS, lengths=LENGTHS)
def test_every_slot_exactly_once(cfg: Cfg, lengths: list[int]) -> None:
    """R-SHARD-4: the ranks' row maps are a permutation of the padded buffer."""
    config = cfg.build()
    plan = ref.plan_thd(lengths, config)
    seen = []
    for rank in range(cfg.cp):
        sources = ref.row_map(plan, config, rank)
        assert len(sources) == plan.local_rows
        seen += [(s.seq, s.offset) for s in sources]
        assert all(s.real == (s.offset < lengths[s.seq]) for s in sources)
    everything = [(i, j) for i, p in enumerate(plan.seqlens_padded.tolist()) for j in range(p)]
    assert len(seen) == len(set(seen)) == plan.total
    assert sorted(seen) == everything


@MEDIUM
@given(
    cfg=PACK_CONFIGS,
    lengths=LENGTHS,
    trail=TRAILS,
    pad_value=st.sampled_from([0, -1, -100, 7]),
)
def test_packed_rows_carry_tokens_once(
    cfg: Cfg, lengths: list[int], trail: tuple[int, ...], pad_value: int
) -> None:
    """R-ROW-1, R-ROW-2, R-ALIGN-4, R-SHARD-4, R-META-6, R-POS-1, R-POS-2: unique values.

    Each real row holds x_i[j] at the (rank, row) the spec's layout gives, each token once;
    padding rows hold pad_value; position ids are int64 offsets.
    """
    config = cfg.build()
    seqs = unique_batch(lengths, trail)
    padded, _ = expected_padded(lengths, cfg)
    pad = pad_row(pad_value, trail, np.int64)
    found: dict[tuple[int, int], int] = {}
    for rank, (rows, pos, plan) in enumerate(pack_all(seqs, config, pad_value=pad_value)):
        assert rows.shape == (plan.local_rows, *trail) and rows.dtype == np.int64  # R-ROW-1
        assert pos.shape == (plan.local_rows,) and pos.dtype == np.int64  # R-POS-1
        for k, (i, j, real) in enumerate(expected_sources(lengths, padded, cfg, rank)):
            if real:
                assert same_bits(rows[k], seqs[i][j]), (rank, k)  # R-ROW-1
                assert pos[k] == j, (rank, k)  # R-POS-2
                # Decode the token from its value: which sequence, which offset.
                flat = int(rows[k].reshape(-1)[0])
                key = (flat >> 32) - 1, (flat & (2**32 - 1)) // math.prod(trail)
                assert key == (i, j)
                found[key] = found.get(key, 0) + 1
            else:
                assert same_bits(rows[k], pad), (rank, k)  # R-ROW-2
    assert found == {(i, j): 1 for i, n in enumerate(lengths) for j in range(n)}  # R-SHARD-4


@MEDIUM
@given(
    cfg=PACK_CONFIGS,
    lengths=LENGTHS,
    trail=TRAILS,
    pad_value=st.sampled_from([0, -100, 3]),
)
def test_need_roll_labels(
    cfg: Cfg, lengths: list[int], trail: tuple[int, ...], pad_value: int
) -> None:
    """R-ROLL-1, R-ROLL-2, R-ROLL-3, R-ROW-2, R-POS-1: labels x[j+1] with positions j+1.

    Also checks that specified_slots marks exactly the spec's unspecified slots.
    """
    config = cfg.build()
    seqs = unique_batch(lengths, trail)
    padded, _ = expected_padded(lengths, cfg)
    pad = pad_row(pad_value, trail, np.int64)
    for rank, (rows, pos, plan) in enumerate(
        pack_all(seqs, config, need_roll=True, pad_value=pad_value)
    ):
        assert pos.dtype == np.int64 and rows.dtype == np.int64
        rows_spec, pos_spec = ref.specified_slots(plan, config, rank, True)
        for k, (i, j, real) in enumerate(expected_sources(lengths, padded, cfg, rank)):
            last = real and j == lengths[i] - 1
            assert rows_spec[k] == (not last), (rank, k)  # R-ROLL-2
            assert pos_spec[k] == (real and not last), (rank, k)  # R-ROLL-2, R-POS-3
            if not real:
                assert same_bits(rows[k], pad), (rank, k)  # R-ROLL-3, R-ROW-2
            elif not last:
                assert same_bits(rows[k], seqs[i][j + 1]), (rank, k)  # R-ROLL-1
                assert pos[k] == j + 1, (rank, k)  # R-ROLL-1


@FAST
@given(cfg=PACK_CONFIGS, lengths=LENGTHS)
def test_specified_slots_without_roll(cfg: Cfg, lengths: list[int]) -> None:
    """R-POS-2, R-POS-3, R-ROW-1, R-ROW-2: without need_roll every row is specified, and the
    position id exactly on real rows."""
    config = cfg.build()
    plan = ref.plan_thd(lengths, config)
    padded, _ = expected_padded(lengths, cfg)
    for rank in range(cfg.cp):
        rows_spec, pos_spec = ref.specified_slots(plan, config, rank, False)
        sources = expected_sources(lengths, padded, cfg, rank)
        assert rows_spec.tolist() == [True] * len(sources)
        assert pos_spec.tolist() == [real for _, _, real in sources]


@MEDIUM
@given(
    cfg=PACK_CONFIGS,
    lengths=LENGTHS,
    trail=TRAILS,
    dtype=DTYPES,
    seed=st.integers(0, 2**32 - 1),
    need_roll=st.booleans(),
)
def test_pad_value_any_dtype(
    cfg: Cfg,
    lengths: list[int],
    trail: tuple[int, ...],
    dtype: str,
    seed: int,
    need_roll: bool,
) -> None:
    """R-IN-1, R-IN-5, R-ROW-1, R-ROW-2, R-ROLL-1, R-ROLL-3: bit-exact rows for every dtype and a
    dtype-extreme pad value, with and without need_roll."""
    config = cfg.build()
    seqs = random_batch(lengths, trail, dtype, seed)
    kind = np.dtype(dtype).kind
    if kind == "b":
        pad_value: Any = bool(seed % 2)
    elif kind in "iu":
        info = np.iinfo(dtype)
        pad_value = int(info.min) if seed % 2 else int(info.max)
    else:
        pad_value = [float("nan"), float("-inf"), float(np.finfo(dtype).max), -0.0, 0.1][seed % 5]
    pad = pad_row(pad_value, trail, dtype)
    padded, _ = expected_padded(lengths, cfg)
    shards = pack_all(seqs, config, need_roll=need_roll, pad_value=pad_value)
    for rank, (rows, _pos, _plan) in enumerate(shards):
        assert rows.dtype == np.dtype(dtype) and rows.shape[1:] == trail
        for k, (i, j, real) in enumerate(expected_sources(lengths, padded, cfg, rank)):
            if not real:
                assert same_bits(rows[k], pad), (rank, k)
            elif not need_roll:
                assert same_bits(rows[k], seqs[i][j]), (rank, k)
            elif j < lengths[i] - 1:
                assert same_bits(rows[k], seqs[i][j + 1]), (rank, k)


# ---------------------------------------------------------------------------------------------
# Unpack.
# ---------------------------------------------------------------------------------------------


def poison(rows: np.ndarray) -> np.ndarray:
    """A value different from every row's, for marking padding rows."""
    if rows.dtype == bool:
        return ~rows
    return (rows.view(np.uint8) ^ np.uint8(0x5A)).view(rows.dtype)


@MEDIUM
@given(
    cfg=PACK_CONFIGS,
    lengths=LENGTHS,
    trail=TRAILS,
    dtype=DTYPES,
    seed=st.integers(0, 2**32 - 1),
)
def test_unpack_inverts_pack(
    cfg: Cfg, lengths: list[int], trail: tuple[int, ...], dtype: str, seed: int
) -> None:
    """R-UNPACK-1, R-UNPACK-2, R-UNPACK-3: unpack(pack) is the batch, bit for bit, and poisoned
    padding rows never reach the output."""
    config = cfg.build()
    seqs = random_batch(lengths, trail, dtype, seed)
    originals = [s.copy() for s in seqs]
    shards = [rows for rows, _, _ in pack_all(seqs, config)]
    plan = ref.plan_thd(lengths, config)
    out = ref.unpack_thd(shards, plan, config)
    assert len(out) == len(lengths)
    for got, want in zip(out, originals, strict=True):
        assert same_bits(got, want)  # R-UNPACK-2 (shape [L_i, *trail], dtype, bits)

    # R-UNPACK-3: overwrite every padding row with a marker, the output must not change.
    padded, _ = expected_padded(lengths, cfg)
    poisoned = []
    for rank, rows in enumerate(shards):
        rows = rows.copy()
        for k, (_, _, real) in enumerate(expected_sources(lengths, padded, cfg, rank)):
            if not real:
                rows[k : k + 1] = poison(rows[k : k + 1])
        poisoned.append(rows)
    again = ref.unpack_thd(tuple(poisoned), plan, config)
    for got, want in zip(again, originals, strict=True):
        assert same_bits(got, want)


@FAST
@given(cfg=PACK_CONFIGS, lengths=LENGTHS, trail=TRAILS)
def test_unpack_scatters_by_row_map(cfg: Cfg, lengths: list[int], trail: tuple[int, ...]) -> None:
    """R-UNPACK-1: element j of output i is the shard row the spec's layout puts (i, j) at, for
    arbitrary shard contents (not only packed ones)."""
    config = cfg.build()
    plan = ref.plan_thd(lengths, config)
    padded, _ = expected_padded(lengths, cfg)
    width = math.prod(trail)
    shards = [
        (np.arange(plan.local_rows * width, dtype=np.int64) + rank * 2**40).reshape(
            (plan.local_rows, *trail)
        )
        for rank in range(cfg.cp)
    ]
    out = ref.unpack_thd(shards, plan, config)
    for rank in range(cfg.cp):
        for k, (i, j, real) in enumerate(expected_sources(lengths, padded, cfg, rank)):
            if real:
                assert same_bits(out[i][j], shards[rank][k])
    assert [o.shape for o in out] == [(n, *trail) for n in lengths]


# ---------------------------------------------------------------------------------------------
# Zero-length sequences.
# ---------------------------------------------------------------------------------------------


@FAST
@given(
    cfg=PACK_CONFIGS,
    lengths=st.lists(LENGTH, min_size=1, max_size=8),
    inserts=st.lists(st.integers(0, 8), min_size=1, max_size=4),
    need_roll=st.booleans(),
)
def test_zero_length_sequences_disturb_nothing(
    cfg: Cfg, lengths: list[int], inserts: list[int], need_roll: bool
) -> None:
    """R-IN-2, R-ROW-3, R-ALIGN-3: inserting empty sequences anywhere (first, middle, last)
    changes no specified value, label or position id of any other sequence's token."""
    config = cfg.build()
    with_empty = list(lengths)
    index = list(range(len(lengths)))  # new position of each original sequence
    for where in inserts:
        where = min(where, len(with_empty))
        with_empty.insert(where, 0)
        index = [n + 1 if n >= where else n for n in index]
    assert [with_empty[n] for n in index] == lengths

    def by_token(batch_lengths: list[int], positions: list[int]) -> dict[tuple[int, int], tuple]:
        """(sequence, offset) -> (value, position id), None where unspecified."""
        seqs = [np.zeros(0, dtype=np.int64) for _ in batch_lengths]
        for original, new in enumerate(positions):  # same values for the same original token
            seqs[new] = np.arange(lengths[original], dtype=np.int64) + (original + 1) * 2**32
        out = {}
        for rank, (rows, pos, plan) in enumerate(
            pack_all(seqs, config, need_roll=need_roll, pad_value=-5)
        ):
            rows_spec, pos_spec = ref.specified_slots(plan, config, rank, need_roll)
            for k, source in enumerate(ref.row_map(plan, config, rank)):
                value = int(rows[k]) if rows_spec[k] else None
                position = int(pos[k]) if pos_spec[k] else None
                if source.real:
                    out[(source.seq, source.offset)] = (value, position)
                else:
                    assert value == -5  # R-ROW-2
        return out

    plain = by_token(lengths, list(range(len(lengths))))
    empties = by_token(with_empty, index)
    assert all(seq in index for seq, _ in empties)  # empty sequences have no real rows
    for original, new in enumerate(index):
        for j in range(lengths[original]):
            assert empties[(new, j)] == plain[(original, j)], (original, j)
    plan = ref.plan_thd(with_empty, config)
    for n in range(len(with_empty)):
        if n not in index and n != len(with_empty) - 1:
            assert plan.seqlens_padded[n] == 0  # R-ALIGN-3


# ---------------------------------------------------------------------------------------------
# Rejections (R-ERR-*). Every fault is single; inputs must be unchanged afterwards.
# ---------------------------------------------------------------------------------------------

CONFIG_FAULTS: list[tuple[str, Any, type[Exception]]] = [
    ("tp_size", True, TypeError),
    ("tp_size", 2.0, TypeError),
    ("tp_size", "2", TypeError),
    ("tp_size", None, TypeError),
    ("tp_size", 0, ValueError),
    ("tp_size", -3, ValueError),
    ("cp_size", False, TypeError),
    ("cp_size", 1.5, TypeError),
    ("cp_size", "4", TypeError),
    ("cp_size", 0, ValueError),
    ("cp_size", -1, ValueError),
    ("bucket", True, TypeError),
    ("bucket", 512.0, TypeError),
    ("bucket", "512", TypeError),
    ("bucket", 0, ValueError),
    ("bucket", -512, ValueError),
    ("min_local_rows", True, TypeError),
    # spec 1.0.1 §0: a bool dtype is not an integer, even where operator.index takes it
    ("tp_size", np.array(True), TypeError),
    ("cp_size", np.bool_(True), TypeError),
    ("bucket", np.array(False), TypeError),
    ("min_local_rows", 128.0, TypeError),
    ("min_local_rows", "128", TypeError),
    ("min_local_rows", 0, ValueError),
    ("min_local_rows", -1, ValueError),
    ("cp_layout", None, TypeError),
    ("cp_layout", 1, TypeError),
    ("cp_layout", b"zigzag", TypeError),
    ("cp_layout", "Zigzag", ValueError),
    ("cp_layout", "ring", ValueError),
    ("cp_layout", "", ValueError),
    ("fp8", 1, TypeError),
    ("fp8", 0, TypeError),
    ("fp8", None, TypeError),
    ("fp8", b"tensor", TypeError),  # spec 1.1: a str names a recipe (test_static.py)
]


@pytest.mark.parametrize(("field", "value", "error"), CONFIG_FAULTS)
def test_config_rejects(field: str, value: Any, error: type[Exception]) -> None:
    """R-IN-3, R-ERR-1, R-ERR-2, R-ERR-3, R-ERR-4: wrong types and values of a PackConfig, with a
    message naming the field and the value."""
    with pytest.raises(error) as caught:
        ref.PackConfig(**{field: value})
    message = str(caught.value)
    assert field in message
    assert repr(value) in message or str(value) in message


@FAST
@given(cfg=configs())
def test_config_accepts_integer_like(cfg: Cfg) -> None:
    """Notation (integers), R-IN-3: NumPy integers are integers; the config equals the int one."""
    integers: dict[str, Any] = dict(
        tp_size=np.int64(cfg.tp),
        cp_size=np.int32(cfg.cp),
        cp_layout=cfg.layout,
        fp8=cfg.fp8,
        bucket=None if cfg.bucket is None else np.int16(min(cfg.bucket, 2**15 - 1)),
        min_local_rows=None if cfg.mlr is None else np.uint16(cfg.mlr),
    )
    config = ref.PackConfig(**integers)
    expected = cfg._replace(bucket=None if cfg.bucket is None else min(cfg.bucket, 2**15 - 1))
    assert config == expected.build()


def snapshot(seqs: Any) -> Any:
    if isinstance(seqs, list | tuple):
        return type(seqs), [snapshot(s) for s in seqs]
    if isinstance(seqs, np.ndarray):
        return seqs.dtype, seqs.shape, seqs.tobytes()
    return seqs


def ok_pad(dtype: np.dtype) -> Any:
    return False if dtype.kind == "b" else 0


PACK_FAULTS = [
    "rank_bool", "rank_float", "rank_str", "rank_none", "rank_negative", "rank_too_big",
    "roll_int", "roll_none", "roll_str",
    "pad_str", "pad_none", "pad_complex", "pad_list", "pad_unrepresentable",
    "batch_ndarray", "batch_dict", "batch_generator", "element_list", "element_scalar",
    "trail_mismatch", "dtype_mismatch", "dtype_unsupported", "batch_empty",
]


@MEDIUM
@given(
    cfg=configs(max_work=4_000),
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    trail=TRAILS,
    dtype=DTYPES,
    fault=st.sampled_from(PACK_FAULTS),
    which=st.integers(0, 11),
)
def test_pack_rejects_single_faults(
    cfg: Cfg,
    lengths: list[int],
    trail: tuple[int, ...],
    dtype: str,
    fault: str,
    which: int,
) -> None:
    """R-IN-4, R-IN-5, R-ERR-1, R-ERR-5, R-ERR-7, R-ERR-9, R-ERR-10, section 11: each single
    fault raises its class and leaves the inputs unchanged."""
    config = cfg.build()
    seqs: Any = random_batch(lengths, trail, dtype, which)
    dt = np.dtype(dtype)
    at = which % len(lengths)
    kwargs: dict[str, Any] = {"need_roll": False, "pad_value": ok_pad(dt)}
    rank: Any = which % cfg.cp
    error: type[Exception] = TypeError
    if fault.startswith("rank_"):
        rank = {
            "rank_bool": True, "rank_float": 0.0, "rank_str": "0", "rank_none": None,
            "rank_negative": -1 - which, "rank_too_big": cfg.cp + which,
        }[fault]
        error = ValueError if fault in ("rank_negative", "rank_too_big") else TypeError
    elif fault.startswith("roll_"):
        kwargs["need_roll"] = {"roll_int": which % 2, "roll_none": None, "roll_str": "yes"}[fault]
    elif fault == "pad_unrepresentable":
        error = ValueError
        if dt.kind == "b":
            kwargs["pad_value"] = [2, -1, 0.5, 7][which % 4]
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            kwargs["pad_value"] = [
                int(info.max) + 1, int(info.min) - 1, 0.5, float("nan"), float("inf"),
            ][which % 5]
        else:
            big = np.finfo(dt).max
            above = np.nextafter(big, np.asarray(np.inf, dtype=dt)).item()  # inf for float64
            kwargs["pad_value"] = [
                -(2**1024) if math.isinf(above) else -above, 2**1024, 10**400,
            ][which % 3]
            if dt == np.float16:
                kwargs["pad_value"] = [65520.0, -65536.0, 1e300][which % 3]
    elif fault.startswith("pad_"):
        kwargs["pad_value"] = {
            "pad_str": "0", "pad_none": None, "pad_complex": 0j, "pad_list": [0],
        }[fault]
    elif fault == "batch_ndarray":
        seqs = np.zeros((len(lengths), 3), dtype=dt)
    elif fault == "batch_dict":
        seqs = dict(enumerate(seqs))
    elif fault == "batch_generator":
        seqs = (s for s in seqs)
    elif fault == "element_list":
        seqs[at] = seqs[at].tolist()
    elif fault == "element_scalar":
        seqs[at] = np.zeros((), dtype=dt)
        error = ValueError
    elif fault == "trail_mismatch":
        seqs[at] = np.zeros((lengths[at], *trail, 2), dtype=dt)
        seqs.append(np.zeros((1, *trail), dtype=dt))  # at differs from one of its neighbours
        error = ValueError
    elif fault == "dtype_mismatch":
        other = np.float64 if dt.kind != "f" else np.int32
        seqs.append(np.zeros((1, *trail), dtype=other))
        if which % 2:
            seqs.reverse()
    elif fault == "dtype_unsupported":
        bad = ["<U3", object, "datetime64[s]", "V4"][which % 4]
        seqs = [np.zeros((n, *trail), dtype=bad) for n in lengths]
        kwargs["pad_value"] = 0
    elif fault == "batch_empty":
        seqs = [] if which % 2 else ()
        error = ValueError
    before = snapshot(seqs) if not hasattr(seqs, "__next__") else None
    with pytest.raises(error):
        ref.pack_thd(seqs, config, rank, **kwargs)
    if before is not None:
        assert snapshot(seqs) == before  # section 11: a rejected call changes nothing


@FAST
@given(cfg=configs(max_work=4_000), fault=st.integers(0, 9), at=st.integers(0, 5))
def test_plan_rejects_bad_lengths(cfg: Cfg, fault: int, at: int) -> None:
    """R-ERR-1, R-ERR-6, R-ERR-7, R-ERR-8: non-integer, negative, too long, empty."""
    lengths: list[Any] = [3, 0, 5, 1, 2, 7][: at + 1]
    bad, error = [
        (True, TypeError),
        (np.True_, TypeError),
        (2.0, TypeError),
        ("3", TypeError),
        (None, TypeError),
        (-1, ValueError),
        (-(2**40), ValueError),
        (INT32_MAX + 1, ValueError),
        (np.int64(-2), ValueError),
        ("empty", ValueError),
    ][fault]
    if bad == "empty":
        lengths = []
    else:
        lengths[at] = bad
    before = list(lengths)
    with pytest.raises(error) as caught:
        ref.plan_thd(lengths, cfg.build())
    assert "seqlens" in str(caught.value)
    assert lengths == before


@pytest.mark.parametrize(
    ("seqlens", "error"),
    [
        (np.array([1.0, 2.0]), TypeError),
        (np.array([True, False]), TypeError),
        (np.array(["3"]), TypeError),
        (np.array([3, -1]), ValueError),
        (np.array([], dtype=np.int64), ValueError),
        (np.array([INT32_MAX + 1], dtype=np.int64), ValueError),
        ({3, 4}, TypeError),
        ("34", TypeError),
        (7, TypeError),
    ],
)
def test_plan_rejects_bad_arrays(seqlens: Any, error: type[Exception]) -> None:
    """R-ERR-1, R-ERR-6, R-ERR-7, R-ERR-8: length containers that are arrays or not sequences."""
    before = snapshot(seqlens)
    with pytest.raises(error):
        ref.plan_thd(seqlens, ref.PackConfig(cp_size=2))
    assert snapshot(seqlens) == before


@FAST
@given(
    cfg=configs(max_work=4_000),
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    trail=TRAILS,
    dtype=DTYPES,
    fault=st.sampled_from(
        ["count_low", "count_high", "rows_low", "rows_high", "scalar", "trail", "dtype", "plan"]
    ),
)
def test_unpack_rejects(
    cfg: Cfg, lengths: list[int], trail: tuple[int, ...], dtype: str, fault: str
) -> None:
    """R-ERR-11: wrong shard count, row count, trailing shape, dtype, or inconsistent plan."""
    config = cfg.build()
    seqs = random_batch(lengths, trail, dtype, 1)
    plan = ref.plan_thd(lengths, config)
    shards: list[Any] = [rows for rows, _, _ in pack_all(seqs, config)]
    last = len(shards) - 1
    if fault == "count_low":
        shards.pop()
    elif fault == "count_high":
        shards.append(shards[0].copy())
    elif fault == "rows_low" and plan.local_rows > 0:
        shards[last] = shards[last][:-1]
    elif fault == "rows_low":  # an all-empty batch without bucket has no rows to drop
        shards[last] = np.zeros((1, *trail), dtype=dtype)
    elif fault == "rows_high":
        shards[last] = np.concatenate([shards[last], shards[last][:1]])
    elif fault == "scalar":
        shards[last] = np.zeros((), dtype=dtype)
    elif fault == "trail":
        shards[last] = np.zeros((plan.local_rows, *trail, 1), dtype=dtype)
    elif fault == "dtype":
        if cfg.cp == 1:
            return  # a lone shard cannot disagree with another one
        shards[last] = shards[last].astype(np.float64 if dtype != "float64" else np.int8)
    elif fault == "plan":
        plan = dataclasses.replace(plan, local_rows=plan.local_rows + cfg.tp)
        shards = [np.zeros((plan.local_rows, *trail), dtype=dtype) for _ in range(cfg.cp)]
    before = snapshot(shards)
    with pytest.raises(ValueError):
        ref.unpack_thd(shards, plan, config)
    assert snapshot(shards) == before


# ---------------------------------------------------------------------------------------------
# pad_value acceptance (R-IN-5).
# ---------------------------------------------------------------------------------------------

PAD_ACCEPTED: list[tuple[str, Any]] = [
    ("bool", False), ("bool", True), ("bool", 0), ("bool", 1),
    ("int8", -128), ("int8", 127), ("int8", -100), ("int8", 5.0),
    ("uint8", 0), ("uint8", 255), ("uint8", 255.0),
    ("int64", 2**63 - 1), ("int64", -(2**63)), ("int64", -(2.0**63)),
    ("uint64", 2**64 - 1),
    ("float16", 65504.0), ("float16", -65504), ("float16", 0.1), ("float16", float("nan")),
    ("float16", float("inf")), ("float32", float(np.finfo(np.float32).max)),
    ("float32", -0.0), ("float64", float(np.finfo(np.float64).max)), ("float64", -float("inf")),
    ("complex64", 1.5), ("complex128", float("nan")),
]


@pytest.mark.parametrize(("dtype", "pad_value"), PAD_ACCEPTED)
def test_pad_value_accepted_and_stored(dtype: str, pad_value: Any) -> None:
    """R-IN-5, R-ROW-2: representable pad values are stored (rounded) on every padding row."""
    seqs = [np.ones((3, 2), dtype=dtype), np.ones((0, 2), dtype=dtype)]
    config = ref.PackConfig(tp_size=4)
    rows, _, plan = ref.pack_thd(seqs, config, 0, pad_value=pad_value)
    assert plan.total == 4
    assert same_bits(rows[3], pad_row(pad_value, (2,), dtype))
    if np.dtype(dtype).kind in "iub":
        assert int(rows[3, 0]) == int(pad_value)


PAD_REJECTED: list[Any] = [
    ("bool", 2), ("bool", -1), ("bool", 0.5),
    ("int8", 128), ("int8", -129), ("int8", 0.5), ("int8", float("nan")),
    ("int8", float("inf")), ("int64", float("-inf")),
    ("uint8", -1), ("uint8", 256), ("uint64", 2**64), ("int64", 2.0**63),
    ("int64", -(2**63) - 1),
    ("float16", 65520.0), ("float16", -65505), ("float32", 1e39), ("float32", -(2**128)),
    ("float64", 2**1024), ("float64", -(10**400)), ("complex64", 1e39),
]


@pytest.mark.parametrize(("dtype", "pad_value"), PAD_REJECTED)
def test_pad_value_rejected(dtype: str, pad_value: Any) -> None:
    """R-IN-5, R-ERR-10: an unrepresentable pad value raises ValueError, inputs unchanged."""
    seqs = [np.ones((3, 2), dtype=dtype), np.zeros((1, 2), dtype=dtype)]
    before = snapshot(seqs)
    with pytest.raises(ValueError) as caught:
        ref.pack_thd(seqs, ref.PackConfig(cp_size=2), 1, pad_value=pad_value)
    assert "pad_value" in str(caught.value)
    assert snapshot(seqs) == before


# ---------------------------------------------------------------------------------------------
# Engine (spec section 10).
# ---------------------------------------------------------------------------------------------

ENGINE_FLAGS = (
    "pad_to_length",
    "use_remove_padding",
    "dynamic_context_parallel",
    "distillation_use_topk",
    "router_replay",
    "use_fp8_padding",
)


def expected_engine(flags: dict[str, bool]) -> type[Exception] | None:
    """R-ENGINE-2..6 in rule order, as written in the spec."""
    pad = flags["pad_to_length"]
    remove = flags["use_remove_padding"]
    dynamic = flags["dynamic_context_parallel"]
    if dynamic and not remove:
        return ValueError  # R-ENGINE-2
    if dynamic and pad:
        return NotImplementedError  # R-ENGINE-3
    if pad and not remove:
        return ValueError  # R-ENGINE-4
    if pad and flags["distillation_use_topk"]:
        return RuntimeError  # R-ENGINE-5
    if pad and flags["router_replay"]:
        return RuntimeError  # R-ENGINE-6
    return None


@MEDIUM
@given(
    cfg=configs(),
    flags=st.fixed_dictionaries({name: st.booleans() for name in ENGINE_FLAGS}),
    bucket=st.integers(1, 5000),
)
def test_engine_resolution(cfg: Cfg, flags: dict[str, bool], bucket: int) -> None:
    """R-ENGINE-2..7: every flag combination resolves to the spec's config or error class."""
    kwargs = dict(
        flags,
        tp_size=cfg.tp,
        cp_size=cfg.cp,
        cp_layout=cfg.layout,
        min_local_rows=cfg.mlr,
        pad_to_length_bucket=bucket,
    )
    error = expected_engine(flags)
    if error is not None:
        with pytest.raises(error) as caught:
            ref.resolve_engine_config(**kwargs)
        assert type(caught.value) is error
        return
    config = ref.resolve_engine_config(**kwargs)
    assert isinstance(config, ref.PackConfig)
    assert (config.tp_size, config.cp_size, config.cp_layout) == (cfg.tp, cfg.cp, cfg.layout)
    assert config.fp8 is flags["use_fp8_padding"]
    assert config.bucket == (bucket if flags["pad_to_length"] else None)
    assert config.min_local_rows == cfg.mlr


def test_engine_defaults() -> None:
    """R-ENGINE-7: the defaults give the default PackConfig (no bucket: pad_to_length is off)."""
    assert ref.resolve_engine_config() == ref.PackConfig()
    assert ref.resolve_engine_config(pad_to_length=True) == ref.PackConfig(bucket=512)


@MEDIUM
@given(
    flags=st.fixed_dictionaries({name: st.booleans() for name in ENGINE_FLAGS}),
    field=st.sampled_from(ENGINE_FLAGS + ("pad_to_length_bucket",)),
    bad=st.sampled_from([0, 1, None, "True", 1.0, "512", True, -4, 0.0]),
)
def test_engine_rejects_types(flags: dict[str, bool], field: str, bad: Any) -> None:
    """R-ENGINE-1, R-ERR-3: non-bool flags raise TypeError; the bucket must be an integer >= 1
    whether or not pad_to_length uses it. Type checks come first (rule order)."""
    if field == "pad_to_length_bucket":
        if isinstance(bad, bool | float | str) or bad is None:
            error: type[Exception] = TypeError
        elif bad < 1:
            error = ValueError
        else:
            return  # a valid bucket
    else:
        if isinstance(bad, bool):
            return  # a valid flag
        error = TypeError
    kwargs: dict[str, Any] = dict(flags)
    kwargs[field] = bad
    # R-ENGINE-1 comes first in rule order, so its error wins over R-ENGINE-2..6 faults.
    with pytest.raises(error) as caught:
        ref.resolve_engine_config(**kwargs)
    assert type(caught.value) is error


@pytest.mark.parametrize(("field", "value", "error"), CONFIG_FAULTS)
def test_engine_passes_config_faults(field: str, value: Any, error: type[Exception]) -> None:
    """R-ENGINE-7, R-ERR-1..4: PackConfig's own checks apply to the resolved config."""
    names = {"fp8": "use_fp8_padding", "bucket": "pad_to_length_bucket"}
    kwargs: dict[str, Any] = {names.get(field, field): value}
    if field == "bucket":
        kwargs["pad_to_length"] = True
    with pytest.raises(error):
        ref.resolve_engine_config(**kwargs)


def test_engine_passes_static_metadata_through() -> None:
    """R-ENGINE-7: max_num_seqs and max_seqlen reach the config unchanged; bad values raise
    PackConfig's own typed errors, naming the field."""
    config = ref.resolve_engine_config(pad_to_length=True, pad_to_length_bucket=1024,
                                       max_num_seqs=16, max_seqlen="total")
    assert (config.bucket, config.max_num_seqs, config.max_seqlen) == (1024, 16, "total")
    for field, value, error in (("max_num_seqs", True, TypeError), ("max_num_seqs", 0, ValueError),
                                ("max_seqlen", 128, TypeError),
                                ("max_seqlen", "bucket", ValueError)):
        with pytest.raises(error, match=field) as caught:
            ref.resolve_engine_config(**{field: value})
        assert type(caught.value) is error
