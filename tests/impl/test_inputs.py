"""Input forms, dtypes and rejections of impl.pack_thd / unpack_thd / plan_thd.

The list-of-tensors result is checked against the reference elsewhere (test_sweep.py); here the
other input forms must give the same rows bit for bit, every torch dtype must pack (including
those NumPy lacks), and bad input must raise the spec's error class before any data is touched.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import impl

CFG = impl.PackConfig(tp_size=2, cp_size=2, bucket=24)
LENGTHS = [3, 0, 5, 9]


def _seqs(dtype: torch.dtype = torch.int64, trail: tuple[int, ...] = (2,)) -> list[torch.Tensor]:
    return [
        (torch.arange(n * 2).reshape(n, 2)[:, : trail[0] if trail else 1] + 1000 * (i + 1))
        .reshape(n, *trail)
        .to(dtype)
        for i, n in enumerate(LENGTHS)
    ]


def _pack_all(
    batch: Any, cfg: impl.PackConfig = CFG, **kw: Any
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [impl.pack_thd(batch, cfg, r, **kw)[:2] for r in range(cfg.cp_size)]


# spec 1.1 conventions: a padding segment and zero-length entries past B (K = 6 > B = 4)
CONVENTION_CFGS = {
    "1.0": CFG,
    "segment-static-zigzag": impl.PackConfig(
        tp_size=2, cp_size=2, bucket=24, tail="segment", seq_align="cp", max_num_seqs=6
    ),
    "segment-static-contiguous": impl.PackConfig(
        cp_size=3, cp_layout="contiguous", bucket=24, tail="segment", max_num_seqs=6,
        fp8="mxfp8",
    ),
}


@pytest.mark.rules("R-IN-1", "R-ROW-1", "R-POS-2", "R-ROLL-1", "R-TAIL-1", "R-STATIC-1")
@pytest.mark.parametrize("config", CONVENTION_CFGS.values(), ids=CONVENTION_CFGS.keys())
@pytest.mark.parametrize("need_roll", [False, True])
def test_input_forms_agree(need_roll: bool, config: impl.PackConfig) -> None:
    """list, tuple, jagged nested tensor (also with holes), padded values + mask, flat values +
    lengths: same output."""
    seqs = _seqs()
    want = _pack_all(seqs, config, need_roll=need_roll, pad_value=-1)
    base = torch.full((len(LENGTHS), 12, 2), -7, dtype=torch.int64)
    for i, s in enumerate(seqs):
        base[i, 2 : 2 + s.shape[0]] = s
    holes = torch.nested.narrow(
        base, 1, torch.full((len(LENGTHS),), 2), torch.tensor(LENGTHS), layout=torch.jagged
    )
    forms = {
        "tuple": tuple(seqs),
        "nested": torch.nested.nested_tensor(seqs, layout=torch.jagged),
        "nested-with-holes": holes,
    }
    for name, batch in forms.items():
        got = _pack_all(batch, config, need_roll=need_roll, pad_value=-1)
        for (a, p), (b, q) in zip(got, want, strict=True):
            assert torch.equal(a, b) and torch.equal(p, q), name
    # padded batch + mask (impl/masked.py): one run per row, and tokens scattered over the row
    run = torch.zeros(len(LENGTHS), 12, dtype=torch.bool)
    scattered = torch.zeros(len(LENGTHS), 24, dtype=torch.bool)
    spread = torch.full((len(LENGTHS), 24, 2), -7, dtype=torch.int64)
    for i, n in enumerate(LENGTHS):
        run[i, 2 : 2 + n] = True
        scattered[i, 1 : 1 + 2 * n : 2] = True
        spread[i, 1 : 1 + 2 * n : 2] = seqs[i]
    masked = {"mask-run": (base, run), "mask-scattered": (spread, scattered)}
    for name, (values, mask) in masked.items():
        got = _pack_all(values, config, mask=mask, need_roll=need_roll, pad_value=-1)
        for (a, p), (b, q) in zip(got, want, strict=True):
            assert torch.equal(a, b) and torch.equal(p, q), name
    flat = torch.cat(seqs)
    for lengths in (LENGTHS, torch.tensor(LENGTHS), torch.tensor(LENGTHS, dtype=torch.int32)):
        got = [
            impl.pack_thd(flat, config, r, lengths=lengths, need_roll=need_roll, pad_value=-1)[:2]
            for r in range(config.cp_size)
        ]
        for (a, p), (b, q) in zip(got, want, strict=True):
            assert torch.equal(a, b) and torch.equal(p, q)


DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


@pytest.mark.rules("R-IN-1", "R-ROW-1", "R-ROW-2", "R-UNPACK-2")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_packs_and_round_trips(dtype: torch.dtype) -> None:
    """Real rows are bit-exact copies, padding rows hold pad_value, unpack inverts, any dtype.

    The expected rows come from packing int64 row *numbers* (not data) and indexing.
    """
    seqs = [torch.arange(n * 2).reshape(n, 2).to(dtype) for n in LENGTHS]
    flat = torch.cat(seqs)
    pad: Any = True if dtype == torch.bool else 1
    ids = [torch.arange(n) + sum(LENGTHS[:i]) for i, n in enumerate(LENGTHS)]
    shards = []
    for r in range(CFG.cp_size):
        rows, _, plan = impl.pack_thd(seqs, CFG, r, pad_value=pad)
        where, _, _ = impl.pack_thd(ids, CFG, r, pad_value=-1)
        assert rows.dtype == dtype and rows.shape == (plan.local_rows, 2)
        real = where >= 0
        as_bits = (lambda t: t.view(torch.uint8)) if dtype.itemsize == 1 else (lambda t: t)
        assert torch.equal(as_bits(rows[real]), as_bits(flat[where[real]]))
        pad_rows = rows[~real]
        assert torch.equal(as_bits(pad_rows), as_bits(torch.full_like(pad_rows, pad)))
        shards.append(rows)
    back = impl.unpack_thd(shards, plan, CFG)
    assert all(
        torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        for a, b in zip(back, seqs, strict=True)
    )


@pytest.mark.rules("R-IN-5", "R-ERR-10")
def test_pad_value_edges() -> None:
    """Range ends are accepted (uint64 max, int64 min, float16 max, NaN, inf); beyond is not."""
    one = [torch.tensor([5], dtype=torch.uint64)]
    rows, _, _ = impl.pack_thd(one, impl.PackConfig(tp_size=2), 0, pad_value=2**64 - 1)
    assert rows.view(torch.int64).tolist() == [5, -1]
    for dtype, ok, bad in [
        (torch.int64, -(2**63), 2**63),
        (torch.float16, 65504.0, 65505),
        (torch.float32, float("nan"), 10**400),
        (torch.bool, 1.0, 2),
        (torch.uint8, 255.0, -1),
    ]:
        seqs = [torch.zeros(1, dtype=dtype)]
        impl.pack_thd(seqs, impl.PackConfig(tp_size=2), 0, pad_value=ok)
        with pytest.raises(ValueError):
            impl.pack_thd(seqs, impl.PackConfig(tp_size=2), 0, pad_value=bad)
    with pytest.raises(ValueError):
        impl.pack_thd([torch.zeros(1, dtype=torch.int32)], impl.PackConfig(), 0, pad_value=0.5)
    with pytest.raises(ValueError):
        impl.pack_thd(
            [torch.zeros(1, dtype=torch.int32)], impl.PackConfig(), 0, pad_value=float("inf")
        )
    # float8 e4m3fn has no infinity (casting saturates to 448); e5m2 has one.
    with pytest.raises(ValueError):
        impl.pack_thd([torch.zeros(1, dtype=torch.float8_e4m3fn)], impl.PackConfig(), 0,
                      pad_value=float("-inf"))
    rows, _, _ = impl.pack_thd([torch.zeros(1, dtype=torch.float8_e5m2)],
                               impl.PackConfig(tp_size=2), 0, pad_value=float("-inf"))
    assert rows.float()[1].item() == float("-inf")


def _ok() -> list[torch.Tensor]:
    return [torch.arange(3), torch.arange(2)]


BAD: list[tuple[str, Any, type[BaseException]]] = [
    ("batch-not-list", lambda: impl.pack_thd(torch.zeros(3, 2), CFG, 0), TypeError),
    ("element-not-tensor", lambda: impl.pack_thd([[1, 2]], CFG, 0), TypeError),
    ("element-0d", lambda: impl.pack_thd([torch.tensor(1)], CFG, 0), ValueError),
    ("empty", lambda: impl.pack_thd([], CFG, 0), ValueError),
    (
        "trail-mismatch",
        lambda: impl.pack_thd([torch.zeros(2, 2), torch.zeros(2, 3)], CFG, 0),
        ValueError,
    ),
    (
        "dtype-mismatch",
        lambda: impl.pack_thd([torch.zeros(2), torch.zeros(2, dtype=torch.int64)], CFG, 0),
        TypeError,
    ),
    ("rank-float", lambda: impl.pack_thd(_ok(), CFG, 1.0), TypeError),
    ("rank-bool", lambda: impl.pack_thd(_ok(), CFG, True), TypeError),
    ("rank-high", lambda: impl.pack_thd(_ok(), CFG, 2), ValueError),
    ("need-roll-int", lambda: impl.pack_thd(_ok(), CFG, 0, need_roll=1), TypeError),
    ("pad-str", lambda: impl.pack_thd(_ok(), CFG, 0, pad_value="0"), TypeError),
    ("pad-none", lambda: impl.pack_thd(_ok(), CFG, 0, pad_value=None), TypeError),
    ("config-dict", lambda: impl.pack_thd(_ok(), {"cp_size": 2}, 0), TypeError),
    ("flat-lengths-sum", lambda: impl.pack_thd(torch.zeros(4), CFG, 0, lengths=[1, 2]), ValueError),
    (
        "flat-lengths-float",
        lambda: impl.pack_thd(torch.zeros(3), CFG, 0, lengths=[1.0, 2]),
        TypeError,
    ),
    (
        "flat-lengths-neg",
        lambda: impl.pack_thd(torch.zeros(3), CFG, 0, lengths=[4, -1]),
        ValueError,
    ),
    ("flat-lengths-empty", lambda: impl.pack_thd(torch.zeros(0), CFG, 0, lengths=[]), ValueError),
    ("lengths-with-list", lambda: impl.pack_thd(_ok(), CFG, 0, lengths=[3, 2]), TypeError),
    ("strided-nested", lambda: impl.pack_thd(torch.nested.nested_tensor(_ok()), CFG, 0), TypeError),
    ("plan-length-bool", lambda: impl.plan_thd([True], CFG), TypeError),
    ("plan-float-tensor", lambda: impl.plan_thd(torch.tensor([1.0]), CFG), TypeError),
    ("plan-2d", lambda: impl.plan_thd(torch.ones(2, 2, dtype=torch.int64), CFG), ValueError),
    ("plan-str", lambda: impl.plan_thd("12", CFG), TypeError),
    ("plan-huge-length", lambda: impl.plan_thd([2**70], CFG), ValueError),
]


@pytest.mark.rules("R-ERR-1", "R-ERR-5", "R-ERR-6", "R-ERR-7", "R-ERR-8", "R-ERR-9", "R-ERR-10")
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_rejections(case: tuple[str, Any, type[BaseException]]) -> None:
    """Bad input raises the spec's class; the message names the value where one is given."""
    _, call, error = case
    with pytest.raises(error):
        call()


@pytest.mark.rules("R-ERR-1", "R-ERR-11")
def test_unpack_rejections() -> None:
    """Shard count, rows, trailing shape, dtype, and a tampered plan (R-ERR-11)."""
    plan = impl.plan_thd([3, 5], CFG)
    good = [torch.zeros(plan.local_rows, 2) for _ in range(2)]
    impl.unpack_thd(good, plan, CFG)
    cases = [
        good[:1],
        [good[0], torch.zeros(plan.local_rows + 1, 2)],
        [good[0], torch.zeros(plan.local_rows, 3)],
        [good[0], torch.zeros(plan.local_rows, 2, dtype=torch.float64)],
        [good[0], torch.zeros(())],
    ]
    for shards in cases:
        with pytest.raises(ValueError):
            impl.unpack_thd(shards, plan, CFG)
    import dataclasses

    for tampered in (
        dataclasses.replace(plan, total=plan.total + 2),
        dataclasses.replace(plan, seqlens=torch.tensor([3, 500], dtype=torch.int32)),
    ):
        with pytest.raises(ValueError):
            impl.unpack_thd(good, tampered, CFG)
    with pytest.raises(TypeError):
        impl.unpack_thd(good, {"total": 1}, CFG)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        impl.unpack_thd([g.numpy() for g in good], plan, CFG)


@pytest.mark.rules("R-ERR-1", "R-ERR-9")
def test_rejected_call_touches_no_data() -> None:
    """Checks run before any data is read: a rejected call leaves inputs unchanged and
    dispatches no op on them (spec §11)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    seqs = [torch.arange(3), torch.arange(2, dtype=torch.int32)]
    before = [s.clone() for s in seqs]
    with Log(), pytest.raises(TypeError):
        impl.pack_thd(seqs, CFG, 0)
    assert not any("index_select" in s or "cat" in s for s in seen), seen
    assert all(torch.equal(a, b) for a, b in zip(seqs, before, strict=True))


@pytest.mark.rules("R-IN-3")
def test_config_normalises_integer_likes_to_int() -> None:
    """NumPy integers are accepted and stored as Python ints, as in the reference (R-IN-3)."""
    import numpy as np

    config = impl.PackConfig(
        tp_size=np.int32(2), cp_size=np.int64(2), bucket=np.int64(512), min_local_rows=np.int16(3)
    )
    for field in ("tp_size", "cp_size", "bucket", "min_local_rows"):
        assert type(getattr(config, field)) is int, field
    assert config == impl.PackConfig(tp_size=2, cp_size=2, bucket=512, min_local_rows=3)
    assert hash(config) == hash(impl.PackConfig(tp_size=2, cp_size=2, bucket=512, min_local_rows=3))


class _Tagged(torch.Tensor):
    """A tensor subclass, as a trainer's own tensor types are."""


@pytest.mark.rules("R-IN-1", "R-ROW-1", "R-POS-2")
def test_list_of_tensor_subclasses_packs_like_plain_tensors() -> None:
    """nn.Parameter and other subclasses skip the one-pass list check and take the ordered checks;
    the rows and position ids are the same as for plain tensors."""
    seqs = [s.to(torch.float32) for s in _seqs()]
    want = _pack_all(seqs)
    for wrap in (lambda t: torch.nn.Parameter(t.clone(), requires_grad=False),
                 lambda t: t.clone().as_subclass(_Tagged)):
        got = _pack_all([wrap(s) for s in seqs])
        for (rows, pos), (want_rows, want_pos) in zip(got, want, strict=True):
            assert torch.equal(rows.as_subclass(torch.Tensor), want_rows)
            assert torch.equal(pos.as_subclass(torch.Tensor), want_pos)


@pytest.mark.rules("R-IN-1", "R-ROW-1")
def test_nested_input_that_requires_grad_backpropagates() -> None:
    """A nested tensor that requires grad is read through its public accessors, so the packed
    rows stay connected to it: the gradient of their sum is 1 on every real token."""
    seqs = [s.to(torch.float32) for s in _seqs()]
    nt = torch.nested.nested_tensor(seqs, layout=torch.jagged, requires_grad=True)
    total = sum(impl.pack_thd(nt, CFG, r)[0].sum() for r in range(CFG.cp_size))
    total.backward()
    assert nt.grad is not None
    assert all(torch.equal(g, torch.ones_like(g)) for g in nt.grad.unbind())
