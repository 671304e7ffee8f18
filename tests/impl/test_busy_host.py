"""Busy hosts: no pass over the output rows before the gather forks torch's CPU thread pool.

Element-wise kernels (`fill_` behind `torch.full`, `clamp_`, arithmetic, copies) run as
parallel regions once they pass torch's grain size (32768 elements), and stall on a busy host.
Which ops touch every row is a property of the call, checked here op by op; how long they take
is the benchmark's business (`python -m bench.run --busy`).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import impl

# Ops allowed to produce or rewrite a row-sized tensor before (and including) the gather:
# plain loops and 1-D scans that torch runs on one thread, indexed writes of O(B) entries,
# and views.
SERIAL_OR_VIEW = {
    "repeat_interleave",  # one count: one plain loop
    "cumsum_",
    "cumsum",  # a 1-D scan into a fresh or reused buffer
    "index_put_",  # writes O(B) entries (accumulating: serial on the CPU)
    "index_select",  # the gather; 1-D rows: one thread
    "slice",
    "view",
    "alias",
    "detach",
}
FILLS = {"index_fill_", "masked_fill_"}  # writing pad_value: after the gather


class RowOps(TorchDispatchMode):
    """Names of the ops that output a tensor of at least `rows` elements, in call order."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        if any(o.numel() >= self.rows for o in outs):
            self.names.append(str(func.overloadpacket.__name__))
        return out


@pytest.mark.rules("R-ROW-1", "R-ROW-2", "R-POS-2")
@pytest.mark.parametrize("form", ["nested", "flat"])
@pytest.mark.parametrize("need_roll", [False, True])
@pytest.mark.parametrize(
    "config",
    [
        impl.PackConfig(tp_size=2, cp_size=4, bucket=512),
        impl.PackConfig(cp_size=3, cp_layout="contiguous", fp8=True),
        impl.PackConfig(),
    ],
    ids=["zigzag-cp4", "contig-cp3-fp8", "cp1"],
)
def test_no_elementwise_pass_over_the_rows(
    form: str, need_roll: bool, config: impl.PackConfig
) -> None:
    """Every row-sized op is a serial loop, a scan, an O(B) write, a view, or the fill of the
    padding rows; and the result is the reference's."""
    import numpy as np

    from thd_packing import reference as ref

    gen = torch.Generator().manual_seed(15)
    lengths = torch.randint(1, 4096, (96,), generator=gen).tolist()
    seqs = [torch.randint(0, 1000, (n,), generator=gen) for n in lengths]
    batch: Any = torch.nested.nested_tensor(seqs, layout=torch.jagged)
    kwargs: dict[str, Any] = {}
    if form == "flat":
        batch, kwargs = torch.cat(seqs), {"lengths": lengths}
    plan = impl.plan_thd(lengths, config)
    assert plan.local_rows > 32768  # large enough that an element-wise pass would fork
    with RowOps(plan.local_rows) as log:
        rows, pos, _ = impl.pack_thd(batch, config, 0, need_roll=need_roll, pad_value=-1,
                                     **kwargs)
    gather = log.names.index("index_select")
    assert set(log.names[: gather + 1]) <= SERIAL_OR_VIEW, log.names
    assert set(log.names[gather + 1 :]) <= SERIAL_OR_VIEW | FILLS, log.names
    ref_config = ref.PackConfig(tp_size=config.tp_size, cp_size=config.cp_size,
                                cp_layout=config.cp_layout, fp8=config.fp8,
                                bucket=config.bucket)
    want_rows, want_pos, ref_plan = ref.pack_thd([s.numpy() for s in seqs], ref_config, 0,
                                                 need_roll=need_roll, pad_value=-1)
    rows_ok, pos_ok = ref.specified_slots(ref_plan, ref_config, 0, need_roll)
    assert rows_ok.any() and pos_ok.any()
    np.testing.assert_array_equal(rows.numpy()[rows_ok], want_rows[rows_ok])
    np.testing.assert_array_equal(pos.numpy()[pos_ok], want_pos[pos_ok])


def test_results_do_not_depend_on_the_thread_count() -> None:
    """The caller's thread setting is read, never changed, and changes nothing in the result."""
    seqs = [torch.arange(n) for n in (40000, 3, 25000, 0, 7)]
    config = impl.PackConfig(tp_size=2, cp_size=2, bucket=512)
    before = torch.get_num_threads()
    many = impl.pack_thd(seqs, config, 1, need_roll=True)
    torch.set_num_threads(1)
    try:
        one = impl.pack_thd(seqs, config, 1, need_roll=True)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert torch.get_num_threads() == before
    assert torch.equal(many[0], one[0]) and torch.equal(many[1], one[1])
