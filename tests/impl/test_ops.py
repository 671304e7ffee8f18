"""Cost properties of impl: op count flat in B, no device sync with host lengths, memory.

Ops are counted with `TorchDispatchMode`, which sees every aten op a call dispatches (host
metadata ops included). Device behaviour is checked on the `meta` device: a meta tensor has no
data, so any device-to-host read (`.item()`, `.tolist()`, a copy to the CPU) raises there. A call
that succeeds on meta inputs with host lengths therefore performed no device-to-host sync.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import impl


class OpLog(TorchDispatchMode):
    """Records every dispatched op and the bytes its fresh (non-aliasing) outputs allocate."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.calls: list[tuple[str, list[Any], list[Any]]] = []
        self.fresh_bytes: dict[str, int] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__)
        self.ops[name] += 1
        flat_in = [
            a
            for a in torch.utils._pytree.tree_leaves((args, kwargs))
            if isinstance(a, torch.Tensor)
        ]
        flat_out = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        self.calls.append((name, flat_in, flat_out))
        for ret, o in zip(func._schema.returns, flat_out, strict=False):
            if ret.alias_info is None:
                self.fresh_bytes[o.device.type] += o.numel() * o.element_size()
        return out

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def _ptr(t: torch.Tensor) -> int | None:
    """Storage address of a plain tensor (nested wrappers have none)."""
    return None if t.is_nested else t.untyped_storage().data_ptr()


def _lengths(b: int, seed: int, hi: int = 2048) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(0, hi) for _ in range(b)]


CONFIGS = [
    impl.PackConfig(),
    impl.PackConfig(tp_size=2, cp_size=4, bucket=512),
    impl.PackConfig(tp_size=2, cp_size=3, cp_layout="contiguous", fp8=True, min_local_rows=64),
]


@pytest.mark.rules("R-SHARD-2", "R-SHARD-3", "R-ROW-1", "R-ROLL-1")
@pytest.mark.parametrize("form", ["list", "nested", "flat"])
@pytest.mark.parametrize("config", CONFIGS, ids=["cp1", "zigzag-cp4", "contig-cp3-fp8"])
@pytest.mark.parametrize("need_roll", [False, True])
def test_pack_op_count_flat_in_batch_size(
    form: str, config: impl.PackConfig, need_roll: bool
) -> None:
    """The number of dispatched torch ops per pack_thd call is the same for B = 16 and 1024."""
    counts = {}
    for b in (16, 1024):
        lengths = _lengths(b, seed=b, hi=64)
        seqs = [torch.zeros(n, 3, dtype=torch.int32) for n in lengths]
        if form == "list":
            arg: Any = seqs
            kw: dict[str, Any] = {}
        elif form == "nested":
            arg = torch.nested.nested_tensor(seqs, layout=torch.jagged)
            kw = {}
        else:
            arg = torch.cat(seqs)
            kw = {"lengths": lengths}
        # rank 0 holds real rows in every config here (an all-padding rank takes a shortcut)
        with OpLog() as counts[b]:
            impl.pack_thd(arg, config, 0, need_roll=need_roll, **kw)
    assert counts[16].ops == counts[1024].ops, (counts[16].ops, counts[1024].ops)
    assert counts[16].total < 200  # a fixed pipeline: ~100 small host ops, ~10 on the device
    assert counts[1024].ops["index_select"] <= 1  # one gather per packed tensor


# One config per spec 1.1 convention (and all of them at once); max_num_seqs fits B = 1024.
CONVENTIONS = {
    "segment-cp1": impl.PackConfig(tail="segment"),
    "segment-zigzag-cp4": impl.PackConfig(tp_size=2, cp_size=4, tail="segment"),
    "seq-align-cp-zigzag-cp4": impl.PackConfig(tp_size=2, cp_size=4, seq_align="cp"),
    "mxfp8-tp2-cp2": impl.PackConfig(tp_size=2, cp_size=2, fp8="mxfp8"),
    "nvfp4-contig-cp3": impl.PackConfig(cp_size=3, cp_layout="contiguous", fp8="nvfp4"),
    "static-last": impl.PackConfig(tp_size=2, max_num_seqs=1100, max_seqlen="total"),
    "static-segment-cp4": impl.PackConfig(
        cp_size=4, tail="segment", max_num_seqs=1100, max_seqlen="total"
    ),
    "everything-contig-cp3": impl.PackConfig(
        tp_size=2, cp_size=3, cp_layout="contiguous", fp8="block", tail="segment",
        seq_align="cp", max_num_seqs=1100, max_seqlen="total", min_local_rows=64,
    ),
}


@pytest.mark.rules("R-TAIL-1", "R-TAIL-2", "R-ALIGN-5", "R-FP8-1", "R-STATIC-1", "R-STATIC-2")
@pytest.mark.parametrize("regime", ["mostly-real", "mostly-padding"])
@pytest.mark.parametrize("config", CONVENTIONS.values(), ids=CONVENTIONS.keys())
@pytest.mark.parametrize("need_roll", [False, True])
def test_op_count_flat_in_batch_size_per_convention(
    config: impl.PackConfig, regime: str, need_roll: bool
) -> None:
    """Under every convention pack_thd and unpack_thd dispatch as many ops for B = 16 as for
    B = 1024, and gather once.

    A pack takes one of two fill paths by its share of padding rows (`index_fill_` or
    `masked_fill_`), so each regime keeps that share on one side at both sizes: long
    sequences with a bucket far below the total, or 1- and 2-row sequences with a bucket far
    above it (the padding segment then holds most rows).
    """
    bucket = 64 if regime == "mostly-real" else 2**16
    config = dataclasses.replace(config, bucket=bucket)
    counts, unpack_counts = {}, {}
    for b in (16, 1024):
        rng = random.Random(b)
        lengths = [rng.randint(40, 64) if regime == "mostly-real" else rng.randint(1, 2)
                   for _ in range(b)]
        a = config.sequence_align
        while sum(-(-n // a) * a for n in lengths) % config.total_modulus == 0:
            lengths[0] += 1  # keep T > S: whether T - S rows exist is a branch of the plan
        seqs = [torch.zeros(n, 3, dtype=torch.int32) for n in lengths]
        with OpLog() as counts[b]:
            _, _, plan = impl.pack_thd(seqs, config, 0, need_roll=need_roll)
        shards = [torch.zeros(plan.local_rows, 2) for _ in range(config.cp_size)]
        with OpLog() as unpack_counts[b]:
            impl.unpack_thd(shards, plan, config)
    assert counts[16].ops == counts[1024].ops, (counts[16].ops, counts[1024].ops)
    assert counts[1024].ops["index_select"] == 1
    fill = "index_fill_" if regime == "mostly-real" else "masked_fill_"
    assert counts[16].ops[fill] == 1 and counts[1024].ops[fill] == 1
    assert unpack_counts[16].ops == unpack_counts[1024].ops
    assert unpack_counts[1024].ops["index_select"] == 1


def _device_ops(config: impl.PackConfig, lengths: list[int]) -> Counter[str]:
    """The ops a pack dispatches on the data's device (`meta`), by name."""
    values = torch.empty(sum(lengths), 3, device="meta")
    with OpLog() as log:
        impl.pack_thd(values, config, 0, lengths=lengths)
    return Counter(
        name
        for name, inputs, outputs in log.calls
        if any(t.device.type == "meta" for t in (*inputs, *outputs))
    )


@pytest.mark.rules("R-TAIL-1", "R-TAIL-2", "R-ALIGN-5", "R-FP8-1", "R-STATIC-1")
@pytest.mark.parametrize("config", CONVENTIONS.values(), ids=CONVENTIONS.keys())
def test_conventions_add_no_device_op(config: impl.PackConfig) -> None:
    """The conventions live in the host plan: on the device a pack under any of them runs
    exactly the ops of a 1.0 pack (the padding segment's position ids come from the same
    ramp, restarting at its first offset)."""
    lengths = [41, 64, 0, 57, 50, 63]
    config = dataclasses.replace(config, bucket=64)
    assert _device_ops(config, lengths) == _device_ops(impl.PackConfig(bucket=64), lengths)


@pytest.mark.rules("R-UNPACK-1")
@pytest.mark.parametrize("config", CONFIGS, ids=["cp1", "zigzag-cp4", "contig-cp3-fp8"])
def test_unpack_op_count_flat_in_batch_size(config: impl.PackConfig) -> None:
    """unpack_thd is vectorized the same way: op count independent of B, one gather."""
    counts = {}
    for b in (16, 1024):
        lengths = _lengths(b, seed=b, hi=64)
        plan = impl.plan_thd(lengths, config)
        shards = [torch.zeros(plan.local_rows, 2) for _ in range(config.cp_size)]
        with OpLog() as counts[b]:
            impl.unpack_thd(shards, plan, config)
    assert counts[16].ops == counts[1024].ops
    assert counts[1024].ops["index_select"] == 1


D2H = {"_local_scalar_dense", "item", "tolist"}


@pytest.mark.parametrize("form", ["list", "flat-list", "flat-cpu-tensor"])
@pytest.mark.parametrize(
    "config",
    [*CONFIGS, *CONVENTIONS.values()],
    ids=["cp1", "zigzag-cp4", "contig-cp3-fp8", *CONVENTIONS.keys()],
)
def test_no_device_sync_with_host_lengths(form: str, config: impl.PackConfig) -> None:
    """With host lengths, pack_thd never reads device data on the host.

    The data lives on `meta`: any device-to-host read would raise. The log also shows no
    scalar read and no copy from the device to the CPU.
    """
    lengths = _lengths(64, seed=3, hi=100)
    if form == "list":
        arg: Any = [torch.empty(n, 4, device="meta", dtype=torch.bfloat16) for n in lengths]
        kw: dict[str, Any] = {}
    else:
        arg = torch.empty(sum(lengths), 4, device="meta", dtype=torch.bfloat16)
        kw = {"lengths": lengths if form == "flat-list" else torch.tensor(lengths)}
    with OpLog() as log:
        rows, pos, plan = impl.pack_thd(arg, config, 0, need_roll=True, pad_value=-100, **kw)
    assert rows.device.type == "meta" and pos.device.type == "meta"
    assert tuple(rows.shape) == (plan.local_rows, 4) and tuple(pos.shape) == (plan.local_rows,)
    for name, inputs, outputs in log.calls:
        on_device = any(t.device.type == "meta" for t in inputs)
        assert not (on_device and name in D2H), name
        if on_device and any(t.device.type == "cpu" for t in outputs):
            raise AssertionError(f"{name} copied device data to the host")


def test_device_lengths_cost_one_copy() -> None:
    """Documented behaviour: lengths on the device are copied to the host (the one sync).

    On `meta` that copy cannot happen: R-DEV-3's ValueError, naming the field, before it.
    """
    values = torch.empty(10, device="meta")
    with pytest.raises(ValueError, match="lengths is on device meta"):
        impl.pack_thd(values, impl.PackConfig(), 0, lengths=torch.tensor([4, 6], device="meta"))


@pytest.mark.parametrize(
    "config",
    [*CONFIGS, *CONVENTIONS.values()],
    ids=["cp1", "zigzag-cp4", "contig-cp3-fp8", *CONVENTIONS.keys()],
)
def test_device_memory_at_most_one_int64_per_row(config: impl.PackConfig) -> None:
    """Apart from rows and position ids, the device allocates <= 8 bytes per output row.

    Plus the chunk tables copied from the host, at most 64 int64 per segment (two chunks per
    segment under zigzag, a few table entries each). There are K = len(plan.seqlens) segments:
    B, B + 1 with a padding segment, max_num_seqs with static metadata.
    """
    lengths = [5000, 3, 7000, 0, 4096]
    values = torch.empty(sum(lengths), 64, device="meta", dtype=torch.float32)
    with OpLog() as log:
        rows, pos, plan = impl.pack_thd(values, config, 0, lengths=lengths, need_roll=True)
    outputs = rows.numel() * rows.element_size() + pos.numel() * pos.element_size()
    extra = log.fresh_bytes["meta"] - outputs
    k = plan.seqlens.numel()
    assert extra <= 8 * plan.local_rows + 64 * 8 * k, (extra, plan.local_rows, k)


def test_nested_input_is_gathered_without_copy() -> None:
    """A jagged nested tensor's values buffer is read once, by the gather, never copied."""
    seqs = [torch.randn(n, 8) for n in (300, 0, 513, 77)]
    nt = torch.nested.nested_tensor(seqs, layout=torch.jagged)
    values_ptr = nt.values().untyped_storage().data_ptr()
    cfg = impl.PackConfig(tp_size=2, cp_size=2)
    with OpLog() as log:
        rows, _, plan = impl.pack_thd(nt, cfg, 1)
    readers = [
        name
        for name, inputs, _ in log.calls
        if any(_ptr(t) == values_ptr for t in inputs)
        and name not in ("values", "_nested_get_values", "detach", "alias", "view")
    ]
    assert readers == ["index_select"], readers
    values_bytes = nt.values().numel() * nt.values().element_size()
    big = [
        o.numel() * o.element_size()
        for _, _, outs in log.calls
        for o in outs
        if not o.is_nested
        and o.numel() * o.element_size() >= values_bytes
        and _ptr(o) not in (_ptr(rows), values_ptr)  # the output, or views of the input
    ]
    assert not big, big
    shards = [impl.pack_thd(nt, cfg, r)[0] for r in range(2)]
    back = impl.unpack_thd(shards, plan, cfg)
    assert all(torch.equal(a, b) for a, b in zip(back, seqs, strict=True))


@pytest.mark.rules("R-ROW-1", "R-ROW-2")
@pytest.mark.parametrize(
    ("lengths", "config", "form", "fill_op"),
    [
        # little padding: only the padding rows are written (index_fill_)
        ([37, 20, 64], impl.PackConfig(cp_size=2), "nested", "index_fill_"),
        # mostly padding: a bool mask per row is cheaper than an int64 per padding row
        ([1, 2], impl.PackConfig(bucket=256), "nested", "masked_fill_"),
        ([1, 2], impl.PackConfig(bucket=256), "flat", "masked_fill_"),
        # a list is copied into one buffer first, then takes the same paths
        ([37, 20, 64], impl.PackConfig(cp_size=2), "list", "index_fill_"),
        ([1, 2], impl.PackConfig(bucket=256), "list", "masked_fill_"),
    ],
)
def test_padding_fill_paths_agree_with_reference(
    lengths: list[int], config: impl.PackConfig, form: str, fill_op: str
) -> None:
    """R-ROW-1, R-ROW-2: every way of writing pad_value gives the reference's rows."""
    import numpy as np

    from thd_packing import reference as ref

    seqs = [torch.arange(n, dtype=torch.float32).reshape(n, 1).repeat(1, 3) + 1 for n in lengths]
    batch: Any = seqs
    kwargs: dict[str, Any] = {}
    if form == "nested":
        batch = torch.nested.nested_tensor(seqs, layout=torch.jagged)
    elif form == "flat":
        batch, kwargs = torch.cat(seqs), {"lengths": lengths}
    ref_config = ref.PackConfig(cp_size=config.cp_size, bucket=config.bucket)
    fills = ("index_fill_", "masked_fill_")
    for rank in range(config.cp_size):
        with OpLog() as log:
            rows, _, _ = impl.pack_thd(batch, config, rank, pad_value=-5.0, **kwargs)
        used = {op: log.ops[op] for op in fills if log.ops[op]}
        assert used == {fill_op: 1}, dict(log.ops)
        assert log.ops["index_select"] == 1, dict(log.ops)
        want, _, _ = ref.pack_thd([s.numpy() for s in seqs], ref_config, rank, pad_value=-5.0)
        np.testing.assert_array_equal(rows.numpy(), want)


@pytest.mark.rules("R-ROW-1", "R-ROW-2", "R-POS-2", "R-ROLL-1")
@pytest.mark.parametrize("config", CONFIGS, ids=["cp1", "zigzag-cp4", "contig-cp3-fp8"])
def test_int64_index_gives_the_same_pack(
    config: impl.PackConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The int64 gather index (taken beyond about 3e8 rows) builds the same rows and ids.

    The switch point cannot be reached in a test, so the choice is forced both ways.
    """
    import impl.pack as pack_module

    lengths = [5, 0, 37, 1, 64, 19]
    seqs = [torch.arange(n, dtype=torch.int64) * 10 + i for i, n in enumerate(lengths)]
    nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)
    packs: dict[torch.dtype, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for index in (torch.int32, torch.int64):
        monkeypatch.setattr(pack_module, "index_dtype", lambda *bounds, d=index: d)
        packs[index] = [
            impl.pack_thd(batch, config, rank, need_roll=roll, pad_value=-1)[:2]
            for rank in range(config.cp_size)
            for batch in (seqs, nested)
            for roll in (False, True)
        ]
    for (r32, p32), (r64, p64) in zip(packs[torch.int32], packs[torch.int64], strict=True):
        assert torch.equal(r32, r64) and torch.equal(p32, p64)
    assert impl.rowmap.index_dtype(2**30, 2**30) == torch.int64
    assert impl.rowmap.index_dtype(2**29, 2**29) == torch.int32


@pytest.mark.rules("R-ROW-1", "R-ROW-2", "R-POS-2", "R-ROLL-1")
@pytest.mark.parametrize("config", CONFIGS, ids=["cp1", "zigzag-cp4", "contig-cp3-fp8"])
def test_index_on_its_own_gives_the_same_pack(
    config: impl.PackConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gather index built in the position ids' buffer and the one built on its own (taken
    when a padding run is longer than the source, or with autograd) give the same pack."""
    import impl.pack as pack_module

    lengths = [5, 0, 37, 1, 64, 19]
    seqs = [torch.arange(n, dtype=torch.int64) * 10 + i for i, n in enumerate(lengths)]
    nested = torch.nested.nested_tensor(seqs, layout=torch.jagged)

    def packs() -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [
            impl.pack_thd(batch, config, rank, need_roll=roll, pad_value=-1)[:2]
            for rank in range(config.cp_size)
            for batch in (seqs, nested)
            for roll in (False, True)
        ]

    shared = packs()
    own = pack_module.positions_and_sources
    monkeypatch.setattr(pack_module, "positions_and_sources",
                        lambda *args, index=True: own(*args, index=False))
    alone = packs()
    for (r1, p1), (r2, p2) in zip(shared, alone, strict=True):
        assert torch.equal(r1, r2) and torch.equal(p1, p2)


@pytest.mark.rules("R-ROW-1", "R-ROW-2", "R-POS-2")
@pytest.mark.parametrize(("bucket", "alone"), [(6, False), (7, True)])
def test_padding_run_as_long_as_the_source(
    bucket: int, alone: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A padding run of exactly the source's rows still fits in the shared buffer's index
    (moved back to start at row 0); one row longer takes the index on its own. Both give the
    reference's pack."""
    import numpy as np

    import impl.pack as pack_module
    from thd_packing import reference as ref

    calls: list[int] = []
    own = pack_module.gather_index
    monkeypatch.setattr(pack_module, "gather_index",
                        lambda *args: calls.append(1) or own(*args))  # type: ignore[func-returns-value]
    seqs = [torch.tensor([7, 8, 9])]
    rows, pos, _ = impl.pack_thd(seqs, impl.PackConfig(bucket=bucket), 0, pad_value=-1)
    ref_config = ref.PackConfig(bucket=bucket)
    want_rows, want_pos, ref_plan = ref.pack_thd([s.numpy() for s in seqs], ref_config, 0,
                                                 pad_value=-1)
    rows_ok, pos_ok = ref.specified_slots(ref_plan, ref_config, 0, False)
    assert bool(calls) == alone
    assert rows_ok.all() and pos_ok.sum() >= 3
    np.testing.assert_array_equal(rows.numpy(), want_rows)
    np.testing.assert_array_equal(pos.numpy()[pos_ok], want_pos[pos_ok])
