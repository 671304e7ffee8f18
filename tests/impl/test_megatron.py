"""The Megatron adapter (impl/megatron.py) under a fake parallel state and a real process group.

Expected values come from the spec's worked examples (§13) and from the literal reference; the
upstream cases verl's own tests pin down are here too: 513 tokens at bucket 512 give 1024 rows,
`min_local_rows` 128 on 100 tokens gives 128 rows, multi-dim router data at cp 2, contiguous
intervals. Upstream verl itself is compared in conformance/ (`--target verl`), not here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

import impl
from thd_packing import reference as ref

pytest.importorskip("megatron.core")
from megatron.core import packed_seq_params as psp_module  # noqa: E402
from megatron.core import parallel_state  # noqa: E402

from impl import megatron as adapter  # noqa: E402


class FakeState:
    """Megatron's parallel-state getters, settable per test; all_gather served from `shards`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tp, self.cp, self.rank = 1, 1, 0
        self.shards: list[torch.Tensor] = []
        self.gathers = 0
        mp = monkeypatch
        mp.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: self.tp)
        mp.setattr(parallel_state, "get_context_parallel_world_size", lambda: self.cp)
        mp.setattr(parallel_state, "get_context_parallel_rank", lambda: self.rank)
        mp.setattr(parallel_state, "get_context_parallel_group", lambda *a, **k: "cp-group")
        mp.setattr(torch.distributed, "all_gather", self._all_gather)

    def _all_gather(self, out: list[torch.Tensor], tensor: torch.Tensor, group: Any = None) -> None:
        assert group == "cp-group" and len(out) == self.cp
        assert not tensor.requires_grad  # verl's contract: the gathered copy is detached
        self.gathers += 1
        for k, o in enumerate(out):
            o.copy_(tensor if k == self.rank else self.shards[k].reshape(o.shape))


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch) -> FakeState:
    return FakeState(monkeypatch)


@dataclasses.dataclass
class ParamsWithMode(psp_module.PackedSeqParams):
    """A PackedSeqParams that has `cp_partition_mode` (megatron-core's development branch)."""

    cp_partition_mode: str = "zigzag"


@dataclasses.dataclass
class OldParams:
    """megatron-core 0.7-0.9 style: no padded cu_seqlens, no CP fields."""

    qkv_format: str | None = None
    cu_seqlens_q: Any = None
    cu_seqlens_kv: Any = None
    max_seqlen_q: Any = None
    max_seqlen_kv: Any = None


def canonical(seqlens: list[int], trail: tuple[int, ...] = (), dtype: Any = torch.int64) -> Any:
    seqs = []
    for i, n in enumerate(seqlens):
        base = torch.arange(n, dtype=torch.int64) + 1000 * (i + 1)
        seqs.append(base.reshape(n, *([1] * len(trail))).expand(n, *trail).to(dtype).contiguous())
    return seqs, torch.nested.nested_tensor(seqs, layout=torch.jagged)


def _specified(got: list[Any], want: list[Any]) -> list[Any]:
    """`got` with the slots `want` leaves unspecified (None) blanked out."""
    assert len(got) == len(want)
    return [g if w is not None else None for g, w in zip(got, want, strict=True)]


@pytest.mark.rules("R-MEG-1", "R-TOTAL-4", "R-TOTAL-5")
def test_bucket_513_gives_1024_rows(state: FakeState) -> None:
    """verl's own test (spec §13.1): 513 tokens, bucket 512, cp = 1 -> 1024 rows."""
    seqs, nt = canonical([513])
    rows, params, pos = adapter.preprocess_thd_engine(nt, pad_to_length_bucket=512)
    assert tuple(rows.shape) == (1, 1024) and tuple(pos.shape) == (1, 1024)
    assert torch.equal(rows[0, :513], seqs[0]) and not rows[0, 513:].any()
    assert torch.equal(pos[0, :513], torch.arange(513))
    assert isinstance(params, psp_module.PackedSeqParams) and params.qkv_format == "thd"
    for field in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        value = getattr(params, field)
        assert value.dtype == torch.int32 and value.tolist() == [0, 1024], field
    assert params.max_seqlen_q == params.max_seqlen_kv == 1024
    assert type(params.max_seqlen_q) is int


@pytest.mark.rules("R-MEG-1", "R-TOTAL-3")
def test_min_local_rows_128_on_100_tokens(state: FakeState) -> None:
    """verl's test (spec §13.6): 100 tokens with min_local_rows = 128 give 128 rows."""
    _, nt = canonical([100])
    rows, params, _ = adapter.preprocess_thd_engine(nt, min_local_rows=128)
    assert tuple(rows.shape) == (1, 128)
    assert params.cu_seqlens_q_padded.tolist() == [0, 128]


@pytest.mark.rules("R-MEG-1", "R-SHARD-2", "R-POS-2", "R-ROLL-1")
@pytest.mark.parametrize("need_roll", [False, True])
def test_zigzag_cp2_example_through_adapter(state: FakeState, need_roll: bool) -> None:
    """Spec §13.2 / §13.7 through the adapter: rows and position ids per rank."""
    state.cp = 2
    if need_roll:
        _, nt = canonical([4, 3])
        want_rows = {0: [1001, None, 2001, 0], 1: [1002, 1003, 2002, None]}
        want_pos = {0: [1, None, 1, None], 1: [2, 3, 2, None]}
    else:
        _, nt = canonical([3, 5])
        want_rows = {0: [1000, 0, 2000, 2001, 0, 0], 1: [1001, 1002, 2002, 2003, 2004, 0]}
        want_pos = {0: [0, None, 0, 1, None, None], 1: [1, 2, 2, 3, 4, None]}
    for rank in (0, 1):
        state.rank = rank
        rows, params, pos = adapter.preprocess_thd_engine(nt, need_roll=need_roll)
        assert _specified(rows[0].tolist(), want_rows[rank]) == want_rows[rank]
        assert _specified(pos[0].tolist(), want_pos[rank]) == want_pos[rank]


@pytest.mark.rules("R-MEG-1", "R-MEG-3", "R-SHARD-2", "R-UNPACK-2")
def test_router_data_cp2_round_trip(state: FakeState) -> None:
    """Multi-dim router data [L, layers, topk] (uint8, as verl's router replay views it) at
    cp = 2, tp = 2: each rank's rows equal the reference's; postprocess rebuilds the input."""
    state.tp, state.cp = 2, 2
    lengths = [5, 0, 9, 1]
    seqs, nt = canonical(lengths, trail=(3, 2), dtype=torch.uint8)
    cfg = ref.PackConfig(tp_size=2, cp_size=2)
    shards = []
    for rank in (0, 1):
        state.rank = rank
        rows, params, _ = adapter.preprocess_thd_engine(nt)
        want, _, _ = ref.pack_thd([s.numpy() for s in seqs], cfg, rank)
        assert rows.dtype == torch.uint8 and tuple(rows.shape) == (1, *want.shape)
        assert np.array_equal(rows[0].numpy(), want)
        shards.append(rows[0])
    state.shards = shards
    state.rank = 1
    out = adapter.postprocess_thd_engine(shards[1][None], params, nt, len(lengths))
    assert out.is_nested and state.gathers == 1
    assert [t.tolist() for t in out.unbind()] == [s.tolist() for s in seqs]


@pytest.mark.rules("R-MEG-3", "R-UNPACK-1")
def test_postprocess_keeps_local_part_in_graph(state: FakeState) -> None:
    """Gradients reach the local rank's output; the other ranks' parts are gathered copies."""
    state.cp, state.rank = 2, 0
    _, nt = canonical([3, 5])
    rows, params, _ = adapter.preprocess_thd_engine(nt)
    other = torch.zeros(rows.shape[1], 1)
    state.shards = [other, other]
    local = rows.to(torch.float32).requires_grad_()
    out = adapter.postprocess_thd_engine(local[..., None], params, nt, 2)
    out.values().sum().backward()
    # rank 0 holds [1000, pad, 2000, 2001, pad, pad]: three real rows
    assert local.grad is not None and local.grad[0].tolist() == [1, 0, 1, 1, 0, 0]


@pytest.mark.rules("R-MEG-2", "R-SHARD-3")
def test_contiguous_needs_cp_partition_mode(state: FakeState) -> None:
    """megatron-core 0.16.1 has no cp_partition_mode: contiguous with cp > 1 raises ValueError
    before any data is read (the input here is not even a tensor)."""
    state.cp = 2
    assert "cp_partition_mode" not in adapter.packed_seq_params_fields(psp_module.PackedSeqParams)
    with pytest.raises(ValueError, match="cp_partition_mode"):
        adapter.preprocess_thd_engine(object(), cp_layout="contiguous")  # type: ignore[arg-type]
    state.cp = 1  # cp = 1 needs no split: allowed
    _, nt = canonical([3])
    rows, _, _ = adapter.preprocess_thd_engine(nt, cp_layout="contiguous")
    assert rows[0].tolist() == [1000, 1001, 1002]


@pytest.mark.rules("R-MEG-1", "R-SHARD-3", "R-SHARD-4")
def test_contiguous_intervals(state: FakeState, monkeypatch: pytest.MonkeyPatch) -> None:
    """With cp_partition_mode available, rank r holds global rows [r*R, (r+1)*R) of the padded
    buffer, and the params say so."""
    monkeypatch.setattr(psp_module, "PackedSeqParams", ParamsWithMode)
    lengths = [7, 1, 4]
    seqs, nt = canonical(lengths)
    state.tp, state.cp = 2, 3
    glob, _, gplan = impl.pack_thd(seqs, impl.PackConfig(tp_size=6), 0)  # one rank, same A
    shards = []
    for rank in range(3):
        state.rank = rank
        rows, params, _ = adapter.preprocess_thd_engine(nt, cp_layout="contiguous")
        assert isinstance(params, ParamsWithMode) and params.cp_partition_mode == "contiguous"
        r = rows.shape[1]
        assert torch.equal(rows[0], glob[rank * r : (rank + 1) * r])
        shards.append(rows[0])
    assert sum(s.shape[0] for s in shards) == gplan.total
    state.shards = shards
    out = adapter.postprocess_thd_engine(shards[2][None], params, nt, 3, cp_layout="contiguous")
    assert [t.tolist() for t in out.unbind()] == [s.tolist() for s in seqs]


@pytest.mark.rules("R-MEG-1")
def test_fills_only_fields_the_version_has(
    state: FakeState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old PackedSeqParams without padded fields is still built (verl would crash)."""
    monkeypatch.setattr(psp_module, "PackedSeqParams", OldParams)
    _, nt = canonical([3, 5])
    _, params, _ = adapter.preprocess_thd_engine(nt)
    assert isinstance(params, OldParams) and params.cu_seqlens_q.tolist() == [0, 3, 8]


@pytest.mark.rules("R-MEG-1")
def test_pre_and_post_process_false(state: FakeState) -> None:
    """pre_process=False returns the input and no position ids; post_process=False is identity."""
    _, nt = canonical([2, 3])
    out, params, pos = adapter.preprocess_thd_engine(nt, pre_process=False)
    assert out is nt and pos is None and params.cu_seqlens_q.tolist() == [0, 2, 5]
    x = torch.zeros(1, 5)
    assert adapter.postprocess_thd_engine(x, params, nt, 2, post_process=False) is x


@pytest.mark.rules("R-TOTAL-2", "R-TOTAL-3", "R-ERR-3", "R-ERR-2")
def test_adapter_applies_errata(state: FakeState) -> None:
    """Where verl 0.9.1 differs, the adapter follows the spec (errata E-1, E-2, E-7)."""
    state.cp = 2
    _, nt = canonical([3])
    rows, params, _ = adapter.preprocess_thd_engine(nt, pad_to_length_bucket=6)  # E-1
    assert params.cu_seqlens_q_padded.tolist() == [0, 12] and rows.shape[1] == 6
    _, nt = canonical([1])
    _, params, _ = adapter.preprocess_thd_engine(nt, min_local_rows=3)  # E-2
    assert params.cu_seqlens_q_padded.tolist() == [0, 8]
    with pytest.raises(TypeError):
        adapter.preprocess_thd_engine(nt, pad_to_length_bucket=True)  # E-7
    with pytest.raises(ValueError):
        adapter.preprocess_thd_engine(nt, min_local_rows=0)  # E-7
    with pytest.raises(ValueError):
        adapter.preprocess_thd_engine(nt, cp_layout="ring")


def test_dynamic_cp_without_support_is_a_clear_error(state: FakeState) -> None:
    """local_cp_size needs get_dynamic_data_context_parallel_groups (absent in 0.16.1)."""
    _, nt = canonical([3])
    if hasattr(parallel_state, "get_dynamic_data_context_parallel_groups"):
        pytest.skip("this megatron-core has dynamic CP groups")
    with pytest.raises(ValueError, match="local_cp_size"):
        adapter.preprocess_thd_engine(nt, local_cp_size=2)


@pytest.mark.rules("R-MEG-1", "R-MEG-3", "R-UNPACK-2")
def test_real_single_process_group(real_group: None) -> None:
    """Real parallel state: tp = cp = 1 read from Megatron, the real PackedSeqParams, a round
    trip through pre- and postprocess with gradients."""
    lengths = [3, 0, 5, 17]
    seqs, nt = canonical(lengths, trail=(2,), dtype=torch.float32)
    rows, params, pos = adapter.preprocess_thd_engine(nt, pad_to_length_bucket=16)
    assert type(params) is psp_module.PackedSeqParams
    assert params.cu_seqlens_q_padded.tolist() == [0, 3, 3, 8, 32]
    assert tuple(rows.shape) == (1, 32, 2) and tuple(pos.shape) == (1, 32)
    leaf = rows.clone().requires_grad_()
    out = adapter.postprocess_thd_engine(leaf * 2, params, nt, len(lengths))
    assert [t.tolist() for t in out.unbind()] == [(2 * s).tolist() for s in seqs]
    out.values().sum().backward()
    assert leaf.grad is not None and int(leaf.grad.sum()) == 2 * 2 * sum(lengths)
