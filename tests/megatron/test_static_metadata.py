"""Spec 1.1's static metadata through the engine adapter (R-STATIC-1, R-STATIC-2):
`max_num_seqs` and `max_seqlen`, keyword-only extensions of verl's engine entry points.

Expectations come from the same call without the static fields (verl's behaviour, pinned
elsewhere) and from the spec's arithmetic, never from the code under test's own output.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("megatron.core")

from impl import megatron as adapter  # noqa: E402

from ._fake_mpu import FakeParallelState, gather_from  # noqa: E402
from .test_cost import OpCount  # noqa: E402

N = 6
CASES = [(1, "zigzag", False), (2, "zigzag", True), (4, "zigzag", False), (1, "zigzag", True),
         (1, "contiguous", True)]


def _nt(lengths: list[int]) -> Any:
    start = [0]
    for n in lengths:
        start.append(start[-1] + n)
    return torch.nested.nested_tensor(
        [torch.arange(start[i], start[i + 1]) + 1 for i in range(len(lengths))],
        layout=torch.jagged)


BATCHES = [[5, 9, 1], [64, 3], [7, 0, 12, 30, 2, 8], [1]]


@pytest.mark.rules("R-STATIC-1", "R-STATIC-2")
@pytest.mark.parametrize("cp,layout,roll", CASES)
def test_static_params_and_rows_match_verl_call(state: FakeParallelState, cp: int, layout: str,
                                                roll: bool) -> None:
    """Shapes fixed by N across batches of different B; cu_seqlens = the plain call's B + 1
    offsets then N - B copies of the total; max_seqlen = total; every row and position id equal
    to the plain call's (the slot fixes included)."""
    state.cp = cp
    shapes = set()
    for lengths in BATCHES:
        nt = _nt(lengths)
        b = len(lengths)
        for rank in range(cp):
            state.rank = rank
            rows0, p0, pos0 = adapter.preprocess_thd_engine(nt, need_roll=roll, cp_layout=layout)
            rows, p, pos = adapter.preprocess_thd_engine(nt, need_roll=roll, cp_layout=layout,
                                                         max_num_seqs=N, max_seqlen="total")
            assert torch.equal(rows, rows0) and torch.equal(pos, pos0)
            cu0 = p0.cu_seqlens_q.tolist()
            total = cu0[-1]
            want = cu0 + [total] * (N - b)
            for key in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
                        "cu_seqlens_kv_padded"):
                got = getattr(p, key)
                assert got.dtype == torch.int32 and got.tolist() == want, key
                shapes.add(tuple(got.shape))
            assert p.max_seqlen_q == p.max_seqlen_kv == total
            assert p0.max_seqlen_q == max(b - a for a, b in zip(cu0, cu0[1:], strict=False))
    assert shapes == {(N + 1,)}


@pytest.mark.rules("R-STATIC-1", "R-MEG-3")
@pytest.mark.parametrize("cp,layout,roll", CASES)
def test_round_trip_returns_the_b_sequences(state: FakeParallelState, cp: int, layout: str,
                                            roll: bool) -> None:
    state.cp = cp
    for lengths in BATCHES:
        nt = _nt(lengths)
        shards, params = [], None
        for rank in range(cp):
            state.rank = rank
            rows, params, _ = adapter.preprocess_thd_engine(nt, cp_layout=layout,
                                                            max_num_seqs=N)
            shards.append(rows * 3)
        state.rank = 0
        with gather_from(shards, None):
            out = adapter.postprocess_thd_engine(shards[0], params, nt, len(lengths),
                                                 cp_layout=layout, max_num_seqs=N)
        assert out.size(0) == len(lengths)
        for got, x in zip(out.unbind(), nt.unbind(), strict=True):
            assert torch.equal(got, 3 * x)
        with pytest.raises(ValueError, match="max_num_seqs"):  # wrong N: entry count checked
            adapter.postprocess_thd_engine(shards[0], params, nt, len(lengths),
                                           cp_layout=layout, max_num_seqs=N + 1)



@pytest.mark.rules("R-ERR-13")
def test_b_above_max_num_seqs_is_rejected_before_the_data(state: FakeParallelState,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    nt = _nt([3, 4, 5])

    def no_data(*a: Any, **k: Any) -> Any:
        raise AssertionError("the batch's data was read")

    monkeypatch.setattr(adapter, "check_batch", no_data)
    with pytest.raises(ValueError, match=r"max_num_seqs=2.*B=3"):
        adapter.preprocess_thd_engine(nt, max_num_seqs=2)
    with pytest.raises(ValueError, match="max_num_seqs=2"):
        adapter.postprocess_thd_engine(torch.zeros(1, 16), None, nt, 3, max_num_seqs=2)


@pytest.mark.rules("R-ERR-12")
@pytest.mark.parametrize("kw", [{"max_num_seqs": 0}, {"max_num_seqs": 2 ** 31},
                                {"max_seqlen": "max"}, {"max_num_seqs": 2.0}])
def test_bad_static_fields_name_the_field(state: FakeParallelState, kw: dict[str, Any]) -> None:
    name = next(iter(kw))
    with pytest.raises((TypeError, ValueError), match=name):
        adapter.preprocess_thd_engine(_nt([3]), **kw)


@pytest.mark.rules("R-MEG-6", "R-MEG-7", "R-STATIC-1")
@pytest.mark.parametrize("layout,roll", [("zigzag", False), ("zigzag", True),
                                         ("contiguous", True)])
def test_op_count_flat_with_max_num_seqs(state: FakeParallelState, layout: str, roll: bool) -> None:
    """With max_num_seqs the dispatched ops do not depend on B (8 vs 500 of N = 512)."""
    state.cp = 2 if layout == "zigzag" else 1
    counts = []
    for b in (8, 500):
        nt = _nt([(7 * i) % 300 + 1 for i in range(b)])
        with OpCount() as log:
            adapter.preprocess_thd_engine(nt, need_roll=roll, cp_layout=layout,
                                          max_num_seqs=512, max_seqlen="total")
        counts.append(log.ops)
    assert counts[0] == counts[1], (counts[0] - counts[1]) + (counts[1] - counts[0])
