"""impl under the spec 1.1 conventions: config checks, plans and packs worked out by hand.

Every expected value below is derived in the comment next to it from the rules (R-ALIGN-5,
R-FP8-1, R-TOTAL-1/-2/-5, R-TAIL-1/-2, R-STATIC-1/-2, R-ERR-12/-13), not from impl.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import impl


@pytest.mark.rules("R-ERR-1", "R-ERR-12")
@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("tail", 1, TypeError),
        ("tail", None, TypeError),
        ("tail", "first", ValueError),
        ("seq_align", b"cp", TypeError),
        ("seq_align", "tp", ValueError),
        ("fp8", 1, TypeError),
        ("fp8", None, TypeError),
        ("fp8", 16.0, TypeError),
        ("fp8", "fp8", ValueError),
        ("fp8", "MXFP8", ValueError),
        ("max_num_seqs", True, TypeError),
        ("max_num_seqs", 4.0, TypeError),
        ("max_num_seqs", "4", TypeError),
        ("max_num_seqs", 0, ValueError),
        ("max_num_seqs", -3, ValueError),
        ("max_seqlen", 128, TypeError),
        ("max_seqlen", "bucket", ValueError),
        ("fixed_total", True, TypeError),
        ("fixed_total", 16.0, TypeError),
        ("fixed_total", 0, ValueError),
        ("fixed_total", 2**31, ValueError),
        ("labels", 1, TypeError),
        ("labels", "shift", ValueError),
        ("ignore_index", True, TypeError),
        ("ignore_index", -100.0, TypeError),
        ("seq_align", "None", ValueError),
        ("tail", "token", ValueError),
    ],
)
def test_bad_convention_values_are_typed_errors(field: str, value: Any, error: type) -> None:
    """R-ERR-1 types, R-ERR-12 values; the message names the field and the value."""
    with pytest.raises(error) as info:
        impl.PackConfig(**{field: value})
    assert type(info.value) is error
    assert field in str(info.value) and repr(value) in str(info.value), str(info.value)


def test_fields_of_1_2_are_appended_with_1_1_defaults() -> None:
    """Spec 1.2's fields follow 1.1's; their defaults build the 1.1 config."""
    names = [f for f in impl.PackConfig.__dataclass_fields__][-3:]
    assert names == ["fixed_total", "labels", "ignore_index"]
    cfg = impl.PackConfig(fixed_total=None, labels="roll", ignore_index=-100)
    assert cfg == impl.PackConfig() and hash(cfg) == hash(impl.PackConfig())
    assert impl.PackConfig(ignore_index=np.int16(-1)).ignore_index == -1  # type: ignore[arg-type]


def test_new_fields_default_to_the_one_convention_of_1_0() -> None:
    """Appended in coord order; the defaults build the 1.0 config (equal and hashed alike)."""
    names = [f for f in impl.PackConfig.__dataclass_fields__][-7:-3]
    assert names == ["tail", "seq_align", "max_num_seqs", "max_seqlen"]
    cfg = impl.PackConfig(tail="last", seq_align="tp_cp", max_num_seqs=None, max_seqlen="exact")
    assert cfg == impl.PackConfig() and hash(cfg) == hash(impl.PackConfig())
    cfg = impl.PackConfig(max_num_seqs=torch.tensor(3))  # type: ignore[arg-type]
    assert cfg.max_num_seqs == 3 and type(cfg.max_num_seqs) is int


@pytest.mark.rules("R-ALIGN-1", "R-ALIGN-2", "R-ALIGN-5", "R-FP8-1", "R-TOTAL-1", "R-TOTAL-2")
@pytest.mark.parametrize(
    ("kwargs", "a0", "a", "q", "f", "m"),
    [
        # tp 2, cp 2 zigzag: A0 = 2 * 2 * 2 = 8; "cp": As = cp * f = 4; M = lcm(A, tp*cp = 4)
        ({"tp_size": 2, "cp_size": 2}, 8, 8, None, None, 8),
        ({"tp_size": 2, "cp_size": 2, "seq_align": "cp"}, 8, 4, None, None, 4),
        # tp 4 alone under "cp": As = 1, the total still needs tp * cp = 4 (and the bucket 6)
        ({"tp_size": 4, "seq_align": "cp", "bucket": 6}, 4, 1, None, None, 12),
        # fp8=True keeps verl's meaning: A = lcm(16, A0), F = 128 * A0 (q = 16 for the contract)
        ({"tp_size": 2, "cp_size": 2, "fp8": True}, 8, 16, 16, 1024, 1024),
        ({"tp_size": 2, "cp_size": 2, "fp8": True, "seq_align": "cp"}, 8, 16, 16, 1024, 1024),
        # recipes: A = As, F = tp * cp * q (q: tensor 16, mxfp8 32, block 16, nvfp4 128)
        ({"tp_size": 2, "cp_size": 2, "fp8": "tensor"}, 8, 8, 16, 64, 64),
        ({"tp_size": 2, "cp_size": 2, "fp8": "mxfp8"}, 8, 8, 32, 128, 128),
        ({"tp_size": 3, "fp8": "block", "seq_align": "cp"}, 3, 1, 16, 48, 48),
        ({"cp_size": 3, "cp_layout": "contiguous", "fp8": "nvfp4"}, 3, 3, 128, 384, 384),
        ({"fp8": "mxfp8", "bucket": 48}, 1, 1, 32, 32, 96),
    ],
)
def test_alignment_per_convention(
    kwargs: dict[str, Any], a0: int, a: int, q: int | None, f: int | None, m: int
) -> None:
    cfg = impl.PackConfig(**kwargs)
    assert cfg.base_align == a0
    assert cfg.sequence_align == a
    assert cfg.fp8_quantum == q
    assert cfg.fp8_total_align == f
    assert cfg.total_modulus == m


def _plan(seqlens: list[int], **kwargs: Any) -> dict[str, Any]:
    plan = impl.plan_thd(seqlens, impl.PackConfig(**kwargs))
    out: dict[str, Any] = {}
    for field in ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded"):
        t = getattr(plan, field)
        assert t.dtype == torch.int32 and t.device.type == "cpu", field
        out[field] = t.tolist()
    for field in ("max_seqlen", "total", "local_rows", "num_seqs"):
        out[field] = getattr(plan, field)
        assert type(out[field]) is int, field
    assert plan.batch_size == plan.num_seqs
    return out


@pytest.mark.rules("R-TOTAL-5", "R-TAIL-1", "R-STATIC-1", "R-STATIC-2", "R-META-4", "R-META-7")
@pytest.mark.parametrize(
    ("seqlens", "kwargs", "want"),
    [
        # bucket 16: S = 8, T = 16. "last": the 8 rows onto sequence 1 (R-TOTAL-5)
        ([3, 5], {"bucket": 16}, ([3, 5], [3, 13], 13, 2)),
        # "segment": entry 2 with L = 0, P = T - S = 8 (R-TAIL-1)
        ([3, 5], {"bucket": 16, "tail": "segment"}, ([3, 5, 0], [3, 5, 8], 8, 2)),
        # T == S: no segment without max_num_seqs
        ([4, 4], {"bucket": 8, "tail": "segment"}, ([4, 4], [4, 4], 4, 2)),
        # max_num_seqs 4 under "last": entries 2, 3 zero-length (R-STATIC-1)
        ([3, 5], {"bucket": 16, "max_num_seqs": 4}, ([3, 5, 0, 0], [3, 13, 0, 0], 13, 2)),
        # ... under "segment": entry 2 the padding segment, entry 3 zero-length
        (
            [3, 5],
            {"bucket": 16, "max_num_seqs": 4, "tail": "segment"},
            ([3, 5, 0, 0], [3, 5, 8, 0], 8, 2),
        ),
        # "segment" with max_num_seqs reserves entry B even when T == S (P = 0 there)
        ([4, 4], {"tail": "segment", "max_num_seqs": 3}, ([4, 4, 0], [4, 4, 0], 4, 2)),
        # max_num_seqs == B under "last" is allowed, and changes nothing
        ([4, 4], {"max_num_seqs": 2}, ([4, 4], [4, 4], 4, 2)),
        # max_seqlen "total": T = 16 whatever the lengths (R-STATIC-2)
        ([3, 5], {"bucket": 16, "max_seqlen": "total"}, ([3, 5], [3, 13], 16, 2)),
        # zero-length batch under "segment" + bucket: S = 0 = T, no segment, max_seqlen 0
        ([0, 0], {"bucket": 16, "tail": "segment"}, ([0, 0], [0, 0], 0, 2)),
        # min_local_rows 5, cp 2 zigzag: A = 4, S = 12, N = 10 -> T = 12; with bucket 8 T = 16
        (
            [3, 5],
            {"cp_size": 2, "min_local_rows": 5, "bucket": 8, "tail": "segment"},
            ([3, 5, 0], [4, 8, 4], 8, 2),
        ),
        # tp 2 cp 2 zigzag "cp": As = 4: [3, 5] -> [4, 8], S = 12, M = 4: T = 12 (tp_cp: 16)
        ([3, 5], {"tp_size": 2, "cp_size": 2, "seq_align": "cp"}, ([3, 5], [4, 8], 8, 2)),
        ([3, 5], {"tp_size": 2, "cp_size": 2}, ([3, 5], [8, 8], 8, 2)),
        # tp 4 "cp": As = 1, S = 9, M = 4: T = 12, the 3 extra rows onto the last sequence
        ([4, 5], {"tp_size": 4, "seq_align": "cp"}, ([4, 5], [4, 8], 8, 2)),
        (
            [4, 5],
            {"tp_size": 4, "seq_align": "cp", "tail": "segment"},
            ([4, 5, 0], [4, 5, 3], 5, 2),
        ),
        # mxfp8 tp 2: A = 2, F = 64: [3, 5] -> [4, 6], S = 10, T = 64 (fp8=True: A 16, T 256)
        (
            [3, 5],
            {"tp_size": 2, "fp8": "mxfp8", "tail": "segment"},
            ([3, 5, 0], [4, 6, 54], 54, 2),
        ),
        ([3, 5], {"tp_size": 2, "fp8": True}, ([3, 5], [16, 240], 240, 2)),
    ],
)
def test_plan_per_convention(
    seqlens: list[int], kwargs: dict[str, Any], want: tuple[list[int], list[int], int, int]
) -> None:
    lengths, padded, max_seqlen, b = want
    got = _plan(seqlens, **kwargs)
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    cup = [0]
    for p in padded:
        cup.append(cup[-1] + p)
    cp = kwargs.get("cp_size", 1)
    assert got == {
        "seqlens": lengths,
        "seqlens_padded": padded,
        "cu_seqlens": cu,
        "cu_seqlens_padded": cup,
        "max_seqlen": max_seqlen,
        "total": cup[-1],
        "local_rows": cup[-1] // cp,
        "num_seqs": b,
    }


@pytest.mark.rules("R-ERR-13")
@pytest.mark.parametrize(
    ("b", "n", "tail"),
    [(3, 2, "last"), (5, 1, "last"), (2, 2, "segment"), (3, 2, "segment"), (1, 1, "segment")],
)
def test_too_many_sequences_for_max_num_seqs(b: int, n: int, tail: str) -> None:
    """R-ERR-13 at plan time from B alone (lengths all zero: never depends on the lengths);
    pack_thd raises it before touching data (the batch lives on `meta`)."""
    cfg = impl.PackConfig(max_num_seqs=n, tail=tail)
    for call in (
        lambda: impl.plan_thd([0] * b, cfg),
        lambda: impl.pack_thd([torch.empty(7, 2, device="meta")] * b, cfg, 0),
    ):
        with pytest.raises(ValueError) as info:
            call()
        msg = str(info.value)
        assert f"max_num_seqs={n}" in msg and f"B={b}" in msg and repr(tail) in msg, msg


def test_max_num_seqs_fits_exactly() -> None:
    """B == max_num_seqs is fine under "last"; "segment" needs one entry more."""
    assert _plan([1, 2], max_num_seqs=2)["seqlens"] == [1, 2]
    assert _plan([1, 2], max_num_seqs=3, tail="segment")["seqlens"] == [1, 2, 0]


@pytest.mark.rules("R-TAIL-1", "R-TAIL-2", "R-ROW-2", "R-POS-2", "R-SHARD-1", "R-SHARD-2")
@pytest.mark.parametrize("form", ["list", "nested", "flat"])
def test_padding_segment_rows_and_position_ids(form: str) -> None:
    """The padding segment's rows hold pad_value and its position ids restart at 0.

    cp 2 zigzag, bucket 8, [3, 5]: A = 4, P = [4, 8], S = 12, T = 16, segment P = 4.
    Chunks (c = P / 4): seq 0 c=1 -> rank 0 offsets {0, 3}, rank 1 {1, 2}; seq 1 c=2 ->
    rank 0 {0, 1, 6, 7}, rank 1 {2..5}; the segment c=1 -> rank 0 {0, 3}, rank 1 {1, 2}.
    """
    cfg = impl.PackConfig(cp_size=2, bucket=8, tail="segment")
    seqs = [torch.tensor([10, 11, 12]), torch.tensor([20, 21, 22, 23, 24])]
    batch: Any = seqs
    kw: dict[str, Any] = {}
    if form == "nested":
        batch = torch.nested.nested_tensor(seqs, layout=torch.jagged)
    elif form == "flat":
        batch, kw = torch.cat(seqs), {"lengths": [3, 5]}
    want_rows = [[10, -1, 20, 21, -1, -1, -1, -1], [11, 12, 22, 23, 24, -1, -1, -1]]
    want_pos = [[0, 3, 0, 1, 6, 7, 0, 3], [1, 2, 2, 3, 4, 5, 1, 2]]
    shards = []
    for rank in range(2):
        rows, pos, plan = impl.pack_thd(batch, cfg, rank, pad_value=-1, **kw)
        assert rows.tolist() == want_rows[rank] and pos.tolist() == want_pos[rank], rank
        shards.append(rows)
    back = impl.unpack_thd(shards, plan, cfg)
    assert [t.tolist() for t in back] == [s.tolist() for s in seqs]


@pytest.mark.rules("R-TAIL-1", "R-TAIL-2", "R-TOTAL-5", "R-STATIC-1", "R-SHARD-3")
def test_tail_and_static_entries_contiguous_cp() -> None:
    """cp 2 contiguous, bucket 12, max_num_seqs 4: A = 2, [3, 1] -> [4, 2], S = 6, T = 12.

    "last": sequence 1 takes P = 8, global rows 0..3 seq 0 (pos 0..3), 4..11 seq 1 (pos 0..7).
    "segment": seq 1 keeps P = 2 (pos 0, 1), the segment rows 6..11 restart at 0.
    """
    seqs = [torch.tensor([1, 2, 3]), torch.tensor([4])]
    last = impl.PackConfig(cp_size=2, cp_layout="contiguous", bucket=12, max_num_seqs=4)
    seg = impl.PackConfig(
        cp_size=2, cp_layout="contiguous", bucket=12, max_num_seqs=4, tail="segment"
    )
    want = {
        last: ([1, 2, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7]),
        seg: ([1, 2, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 5]),
    }
    for cfg, (rows_want, pos_want) in want.items():
        packs = [impl.pack_thd(seqs, cfg, r) for r in range(2)]
        assert sum((p[0].tolist() for p in packs), []) == rows_want
        assert sum((p[1].tolist() for p in packs), []) == pos_want
        plan = packs[0][2]
        assert plan.seqlens.numel() == 4 and plan.num_seqs == 2
        back = impl.unpack_thd([p[0] for p in packs], plan, cfg)
        assert [t.tolist() for t in back] == [[1, 2, 3], [4]]


@pytest.mark.rules("R-TAIL-2", "R-ROLL-1")
def test_need_roll_with_padding_segment_keeps_real_rows() -> None:
    """With need_roll the real rows roll as before; the segment's rows stay padding."""
    cfg = impl.PackConfig(bucket=8, tail="segment")
    rows, pos, _ = impl.pack_thd([torch.tensor([1, 2, 3])], cfg, 0, need_roll=True, pad_value=9)
    # R-ROLL-1: row j takes offset j + 1 (position id j + 1); the last real row is padding
    assert rows.tolist() == [2, 3, 9, 9, 9, 9, 9, 9]
    assert pos.tolist()[:2] == [1, 2]


@pytest.mark.rules("R-UNPACK-1", "R-META-7", "R-ERR-11")
def test_unpack_rejects_forged_num_seqs() -> None:
    """A plan whose num_seqs is out of [1, K], or whose entries past B hold real rows, is
    rejected before any gather."""
    import dataclasses

    cfg = impl.PackConfig(bucket=8, tail="segment", max_num_seqs=4)
    plan = impl.plan_thd([3, 2], cfg)  # seqlens [3, 2, 0, 0], padded [3, 2, 3, 0]
    shards = [torch.zeros(plan.local_rows)]
    assert len(impl.unpack_thd(shards, plan, cfg)) == 2
    # left out, num_seqs is K (a 1.0 caller's plan): every entry then counts as a sequence
    legacy = dataclasses.replace(plan, num_seqs=0)
    assert legacy.num_seqs == 4 and len(impl.unpack_thd(shards, legacy, cfg)) == 4
    for bad in (-1, 5, 2.0, True):
        forged = dataclasses.replace(plan, num_seqs=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="num_seqs"):
            impl.unpack_thd(shards, forged, cfg)
    # num_seqs 1 would leave sequence 1's 2 real rows uncovered: no token silently lost
    with pytest.raises(ValueError, match="inconsistent"):
        impl.unpack_thd(shards, dataclasses.replace(plan, num_seqs=1), cfg)
    # num_seqs 3 (segment 2 counted as a sequence) is consistent: it has no real row
    assert [t.numel() for t in impl.unpack_thd(shards, dataclasses.replace(plan, num_seqs=3),
                                               cfg)] == [3, 2, 0]


@pytest.mark.parametrize("scalar", [torch.tensor(2), np.int64(2)], ids=["tensor", "numpy"])
def test_config_fields_normalised_to_int(scalar: Any) -> None:
    """R-IN-3: a config built from tensor or NumPy scalars holds Python ints, so it compares,
    hashes and prints like one built from ints (a 0-d tensor hashes by identity)."""
    fields = {"tp_size": scalar, "cp_size": scalar, "bucket": scalar, "min_local_rows": scalar,
              "max_num_seqs": scalar}
    config = impl.PackConfig(**fields)
    for name in fields:
        assert type(getattr(config, name)) is int, name
    two: dict[str, Any] = {name: 2 for name in fields}
    plain = impl.PackConfig(**two)
    assert config == plain and hash(config) == hash(plain)


def test_plan_without_num_seqs_is_a_1_0_plan() -> None:
    """R-META-7: a Plan built by a 1.0 caller (no num_seqs) has B = len(seqlens), and unpack
    returns that many sequences."""
    config = impl.PackConfig(cp_size=2)
    batch = [torch.arange(3), torch.arange(5) + 10]
    made = impl.plan_thd([3, 5], config)
    fields = {k: getattr(made, k) for k in ("seqlens", "seqlens_padded", "cu_seqlens",
                                           "cu_seqlens_padded", "max_seqlen", "total",
                                           "local_rows")}
    old = impl.Plan(**fields)
    assert old.num_seqs == 2 and old.batch_size == 2
    shards = [impl.pack_thd(batch, config, r)[0] for r in range(2)]
    out = impl.unpack_thd(shards, old, config)
    assert [t.tolist() for t in out] == [t.tolist() for t in batch]


@pytest.mark.rules("R-ENGINE-7", "R-STATIC-1", "R-STATIC-2")
def test_engine_passes_static_metadata_through() -> None:
    """R-ENGINE-7: the planner's static fields reach the config and its plan (N + 1 entries per
    cu_seqlens array, max_seqlen = T = one bucket of 1024 for 8 tokens); defaults are 1.0's."""
    config = impl.resolve_engine_config(cp_size=4, pad_to_length=True,
                                        pad_to_length_bucket=1024, max_num_seqs=16,
                                        max_seqlen="total")
    assert config == impl.PackConfig(cp_size=4, bucket=1024, max_num_seqs=16,
                                     max_seqlen="total")
    plan = impl.plan_thd([3, 5], config)
    assert len(plan.cu_seqlens) == 17 and len(plan.cu_seqlens_padded) == 17
    assert plan.total == 1024 and plan.max_seqlen == 1024
    assert impl.resolve_engine_config() == impl.PackConfig()


@pytest.mark.rules("R-ENGINE-7", "R-ERR-1", "R-ERR-12")
@pytest.mark.parametrize(
    ("field", "value", "error"),
    [("max_num_seqs", True, TypeError), ("max_num_seqs", "16", TypeError),
     ("max_num_seqs", 0, ValueError), ("max_seqlen", 128, TypeError),
     ("max_seqlen", "bucket", ValueError)],
)
def test_engine_rejects_bad_static_metadata(field: str, value: Any,
                                            error: type[Exception]) -> None:
    """R-ENGINE-7: PackConfig's checks apply to the passed-through fields, naming them."""
    with pytest.raises(error, match=field) as caught:
        impl.resolve_engine_config(pad_to_length=True, **{field: value})
    assert type(caught.value) is error


@pytest.mark.rules("R-ERR-14", "R-ALIGN-6", "R-TAIL-3", "R-TOTAL-7")
@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"cp_size": 2, "seq_align": "none"}, ["seq_align", "'none'", "cp_layout", "cp_size=2"]),
        ({"cp_size": 4, "tail": "tokens"}, ["tail", "'tokens'", "cp_layout", "cp_size=4"]),
        ({"tail": "tokens", "max_num_seqs": 3}, ["tail", "max_num_seqs=3"]),
        ({"fixed_total": 16, "bucket": 8}, ["fixed_total=16", "bucket=8"]),
        ({"tp_size": 2, "cp_size": 2, "fixed_total": 12}, ["fixed_total=12", "M=8"]),
    ],
)
def test_conflicting_1_2_values_name_both_fields(config: dict[str, Any], names: list[str]) -> None:
    """R-ERR-14: a ValueError at config time naming each field and value involved."""
    with pytest.raises(ValueError) as info:
        impl.PackConfig(**config)
    assert all(name in str(info.value) for name in names), str(info.value)


@pytest.mark.rules("R-ERR-15", "R-ERR-16", "R-TOTAL-7", "R-LABEL-2")
def test_fixed_total_and_ignore_index_refused_before_data_is_read() -> None:
    """A fixed total too small (naming N and the needed total) and an ignore_index the dtype
    cannot hold are raised on a batch whose values cannot be read (torch's meta device)."""
    batch = [torch.empty(5, device="meta"), torch.empty(4, device="meta")]
    with pytest.raises(ValueError, match=r"fixed_total=8 .* 9 rows"):
        impl.pack_thd(batch, impl.PackConfig(fixed_total=8), 0)
    with pytest.raises(ValueError, match=r"fixed_total=8 .* 9 rows"):
        impl.plan_thd([5, 4], impl.PackConfig(fixed_total=8))
    bools = [torch.empty(3, dtype=torch.bool, device="meta")]
    with pytest.raises(ValueError, match="ignore_index=-100"):
        impl.pack_thd(bools, impl.PackConfig(labels="ignore"), 0, need_roll=True)
    impl.pack_thd(bools, impl.PackConfig(labels="ignore"), 0)  # no labels: nothing to hold


@pytest.mark.rules("R-LABEL-3")
def test_loss_mask_on_a_device_and_its_argument_checks() -> None:
    """The mask comes on the device asked for; bad arguments are typed errors."""
    cfg = impl.PackConfig(cp_size=2, cp_layout="contiguous", seq_align="none")
    plan = impl.plan_thd([3, 1, 2], cfg)
    assert impl.loss_mask(plan, cfg, 1, device="meta").device.type == "meta"
    assert impl.loss_mask(plan, cfg, 0).tolist() == [True, True, False]
    assert impl.loss_mask(plan, cfg, 1).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="cp_rank"):
        impl.loss_mask(plan, cfg, 2)
    with pytest.raises(TypeError, match="cp_rank"):
        impl.loss_mask(plan, cfg, True)
    with pytest.raises(TypeError, match="config"):
        impl.loss_mask(plan, {}, 0)  # type: ignore[arg-type]
