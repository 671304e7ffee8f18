"""The slot corrections keep impl's cost properties: op count flat in B, no device sync.

Ops are counted with `TorchDispatchMode` (every aten op, host ones included); the no-sync check
runs the correction on `meta` tensors, which have no data, so any device-to-host read raises.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("megatron.core")
from megatron.core import parallel_state  # noqa: E402

from impl import megatron as adapter  # noqa: E402
from impl.plan import plan_with_host  # noqa: E402
from impl.verl_slots import apply_slots, slot_fixes  # noqa: E402


class OpCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def _batch(b: int, seed: int) -> Any:
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(b)]
    lengths[0] = 64  # one sequence with L = P at cp = 2 (rank 0's label slot)
    return torch.nested.nested_tensor([torch.arange(n) for n in lengths], layout=torch.jagged)


@pytest.mark.rules("R-MEG-6", "R-MEG-7")
@pytest.mark.parametrize("layout,roll", [("zigzag", False), ("zigzag", True),
                                         ("contiguous", True)])
def test_op_count_flat_in_batch_size(monkeypatch: pytest.MonkeyPatch, layout: str,
                                     roll: bool) -> None:
    """preprocess_thd_engine dispatches the same ops for B = 8 and B = 512 (cp 1 for the
    contiguous layout: the installed PackedSeqParams has no cp_partition_mode)."""
    cp = 2 if layout == "zigzag" else 1
    monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: 1)
    monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: cp)
    monkeypatch.setattr(parallel_state, "get_context_parallel_rank", lambda: 0)
    counts = []
    for b in (8, 512):
        nt = _batch(b, b)
        with OpCount() as log:
            adapter.preprocess_thd_engine(nt, need_roll=roll, cp_layout=layout)
        counts.append(log.ops)
    assert counts[0] == counts[1], (counts[0] - counts[1]) + (counts[1] - counts[0])


@pytest.mark.rules("R-MEG-6", "R-MEG-7")
@pytest.mark.parametrize("layout,cp,roll", [("zigzag", 2, True), ("zigzag", 1, True),
                                            ("contiguous", 3, True), ("zigzag", 4, False)])
def test_correction_reads_no_device_data(layout: str, cp: int, roll: bool) -> None:
    """The whole correction runs on meta tensors (host table, device writes only)."""
    from impl.config import PackConfig

    lengths = torch.tensor([64, 5, 0, 17, 33], dtype=torch.int64)
    plan, padded, cu = plan_with_host(lengths, PackConfig(cp_size=cp, cp_layout=layout))
    src = torch.cumsum(lengths, 0) - lengths
    meta = torch.device("meta")
    values = torch.empty((int(lengths.sum()), 3), device=meta)
    slots = 0
    for rank in range(cp):
        fix = slot_fixes(lengths, padded, cu, src, cp, layout, rank, plan.local_rows, roll)
        rows = torch.empty((plan.local_rows, 3), device=meta)
        pos = torch.empty(plan.local_rows, dtype=torch.int64, device=meta)
        apply_slots(fix, rows, pos, values)
        assert fix.zero_a.device.type == "cpu"
        slots += int((fix.zero_b - fix.zero_a).sum()) + fix.pos_rows.numel()
    assert slots > 0
