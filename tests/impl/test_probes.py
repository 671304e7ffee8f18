"""impl on inputs a CPU machine can make beyond the usual host tensors: torch's `lazy` device,
which runs on a CPU build and stands in for an accelerator (a tensor there is not on the host,
so every host table must be moved to it and every host read copied back), plans forged in the
wide unsigned dtypes, plans whose total is past 2**31 with a stride-0 shard, a plan on `meta`
with one entry short, and the nested tensor the engine postprocess returns.

Expected values come from the same call on the host (the CPU pack is checked against the
reference elsewhere) or from the spec's rules, not from impl's output on the probed input.
"""

from __future__ import annotations

import pytest
import torch

import impl
from impl.plan import Plan

PLAN_FIELDS = ("seqlens", "seqlens_padded", "cu_seqlens", "cu_seqlens_padded")


@pytest.fixture(scope="module")
def lazy() -> torch.device:
    """torch's lazy device (TorchScript backend): not the host, on a CPU-only build."""
    ts_backend = pytest.importorskip("torch._lazy.ts_backend")
    ts_backend.init()
    return torch.device("lazy")


class Megatron:
    """The Megatron adapter under a fake parallel state of one tensor-parallel rank."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("megatron.core")
        from megatron.core import parallel_state

        from impl import megatron as adapter

        self.adapter, self.cp, self.rank = adapter, 1, 0
        monkeypatch.setattr(parallel_state, "get_tensor_model_parallel_world_size", lambda: 1)
        monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: self.cp)
        monkeypatch.setattr(parallel_state, "get_context_parallel_rank", lambda: self.rank)


@pytest.fixture
def megatron(monkeypatch: pytest.MonkeyPatch) -> Megatron:
    return Megatron(monkeypatch)


def _same(got: torch.Tensor, want: torch.Tensor, device: torch.device) -> None:
    assert got.device.type == device.type, (got.device, device)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu(), want)


def _host_plan(plan: Plan, want: Plan) -> None:
    """`plan` is `want`: host tensors a caller can read (`tolist`), the same ints."""
    for f in PLAN_FIELDS:
        _same(getattr(plan, f), getattr(want, f), torch.device("cpu"))
        assert getattr(plan, f).tolist() == getattr(want, f).tolist()
    assert (plan.total, plan.local_rows, plan.num_seqs) == (want.total, want.local_rows,
                                                            want.num_seqs)


SEQS = [torch.arange(3.0) + 100, torch.arange(5.0) + 200, torch.arange(4.0) + 300]
# one run per row (left, right, middle) and rows whose True entries are scattered
MASKS = {
    "runs": torch.tensor([[1, 1, 1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1, 0, 0],
                          [0, 0, 0, 0, 1, 1, 1, 1]], dtype=torch.bool),
    "scattered": torch.tensor([[1, 0, 1, 1, 0, 0, 0, 0], [0, 1, 1, 0, 1, 1, 0, 1],
                               [0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool),
}
PADDED = torch.arange(24.0).reshape(3, 8)


@pytest.mark.rules("R-DEV-1", "R-IN-1")
@pytest.mark.parametrize("need_roll", [False, True])
def test_lazy_lengths_plan_on_the_host(lazy: torch.device, need_roll: bool) -> None:
    """`lengths=` on a device that is not the host: the plan is still host int32 (one copy to
    the host), the rows and ids are on the values' device with the host pack's values."""
    cfg = impl.PackConfig(cp_size=2)
    lengths = torch.tensor([3, 5, 4])
    _host_plan(impl.plan_thd(lengths.to(lazy), cfg), impl.plan_thd(lengths, cfg))
    flat = torch.cat(SEQS)
    for rank in range(2):
        rows, pos, plan = impl.pack_thd(flat.to(lazy), cfg, rank, lengths=lengths.to(lazy),
                                        need_roll=need_roll)
        want_rows, want_pos, want_plan = impl.pack_thd(flat, cfg, rank, lengths=lengths,
                                                       need_roll=need_roll)
        _same(rows, want_rows, lazy)
        _same(pos, want_pos, lazy)
        _host_plan(plan, want_plan)


@pytest.mark.rules("R-DEV-1", "R-IN-1", "R-ROW-1")
@pytest.mark.parametrize("kind", sorted(MASKS))
def test_lazy_mask_form_packs_like_the_host(lazy: torch.device, kind: str) -> None:
    """The mask form on a device that is not the host (its lengths and run ends copied to the
    host, a scattered mask's token index built on the device): the host pack's rows and ids."""
    cfg = impl.PackConfig(cp_size=2)
    mask = MASKS[kind]
    for rank in range(2):
        for need_roll in (False, True):
            rows, pos, plan = impl.pack_thd(PADDED.to(lazy), cfg, rank, mask=mask.to(lazy),
                                            need_roll=need_roll)
            want_rows, want_pos, want_plan = impl.pack_thd(PADDED, cfg, rank, mask=mask,
                                                           need_roll=need_roll)
            _same(rows, want_rows, lazy)
            _same(pos, want_pos, lazy)
            _host_plan(plan, want_plan)


@pytest.mark.rules("R-DEV-1", "R-MEG-1", "R-MEG-8", "R-MEG-9")
@pytest.mark.parametrize("kind", sorted(MASKS))
def test_lazy_mask_entry_points(lazy: torch.device, megatron: Megatron, kind: str) -> None:
    """preprocess_packed_seqs on a device that is not the host gives cu_seqlens on that device;
    postprocess_packed_seqs scatters the rows back there at the mask's True entries."""
    mask = MASKS[kind]
    want_rows, want_params = megatron.adapter.preprocess_packed_seqs(PADDED, mask)
    rows, params = megatron.adapter.preprocess_packed_seqs(PADDED.to(lazy), mask.to(lazy))
    _same(rows, want_rows, lazy)
    for name in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        _same(getattr(params, name), getattr(want_params, name), lazy)
    back = megatron.adapter.postprocess_packed_seqs(want_rows.to(lazy), want_params,
                                                    mask.to(lazy), 3, 8)
    _same(back, torch.where(mask, PADDED, 0.0), lazy)


def _lazy_nested(seqs: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """A jagged nested tensor on `device`. torch.nested's factories fail on lazy (symbolic
    sizes), so the jagged class is built directly, as those factories do."""
    from torch.nested._internal.nested_tensor import NestedTensor

    offsets = torch.tensor([0, *torch.tensor([len(s) for s in seqs]).cumsum(0).tolist()])
    return NestedTensor(torch.cat(seqs).to(device), offsets.to(device))


@pytest.mark.rules("R-DEV-1", "R-MEG-1", "R-MEG-4", "R-MEG-5")
@pytest.mark.parametrize(("cp", "rank"), [(1, 0), (2, 0), (2, 1)])
def test_lazy_nested_engine_preprocess(lazy: torch.device, megatron: Megatron, cp: int,
                                       rank: int) -> None:
    """preprocess_thd_engine of a nested batch on a device that is not the host: cu_seqlens on
    that device, and the host's rows and ids, verl's label slots included (need_roll)."""
    ints = [torch.arange(n) + 100 * (k + 1) for k, n in enumerate([3, 5, 4])]
    megatron.cp, megatron.rank = cp, rank
    for need_roll in (False, True):
        nested = torch.nested.nested_tensor(ints, layout=torch.jagged)
        want = megatron.adapter.preprocess_thd_engine(nested, need_roll=need_roll)
        got = megatron.adapter.preprocess_thd_engine(_lazy_nested(ints, lazy), need_roll=need_roll)
        _same(got[0], want[0], lazy)
        _same(got[2], want[2], lazy)
        _same(got[1].cu_seqlens_q, want[1].cu_seqlens_q, lazy)
        _same(got[1].cu_seqlens_kv_padded, want[1].cu_seqlens_kv_padded, lazy)


def _forged(plan: Plan, dtype: torch.dtype, device: str = "cpu") -> Plan:
    """The same plan with its arrays in another integer dtype, on `device` (a caller's plan)."""
    arrays = {f: getattr(plan, f).to(device=device, dtype=dtype) for f in PLAN_FIELDS}
    return Plan(**arrays, max_seqlen=plan.max_seqlen, total=plan.total,
                local_rows=plan.local_rows, num_seqs=plan.num_seqs)


@pytest.mark.rules("R-UNPACK-1", "R-LABEL-3")
@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16, torch.uint32, torch.uint64])
@pytest.mark.parametrize("cp_size", [1, 2])
def test_unsigned_plan_unpacks_and_masks(dtype: torch.dtype, cp_size: int) -> None:
    """A plan forged in an unsigned dtype (padding gaps between the sequences; wide unsigned
    types have no arithmetic promotion in torch) unpacks, masks and maps rows (the row map of
    `impl.rowmap.row_sources`) like the int32 plan."""
    from impl.rowmap import row_sources

    cfg = impl.PackConfig(cp_size=cp_size, bucket=32)
    plan = impl.plan_thd([3, 5, 4], cfg)
    shards = [impl.pack_thd(SEQS, cfg, r)[0] for r in range(cp_size)]
    forged = _forged(plan, dtype)
    got = impl.unpack_thd(shards, forged, cfg)
    assert [t.tolist() for t in got] == [s.tolist() for s in SEQS]
    for rank in range(cp_size):
        assert torch.equal(impl.loss_mask(forged, cfg, rank), impl.loss_mask(plan, cfg, rank))
        for got_map, want_map in zip(row_sources(forged, cfg, rank),
                                     row_sources(plan, cfg, rank), strict=True):
            assert torch.equal(got_map, want_map)


@pytest.mark.rules("R-UNPACK-1", "R-IN-1")
@pytest.mark.parametrize("total", [2**31 + 8, 2**40], ids=["past-int32", "2**40"])
def test_int64_plan_past_int32_unpacks_a_stride0_shard(total: int) -> None:
    """An int64 plan whose total is past 2**31 (the real rows at the end), unpacked at cp = 1
    from a stride-0 shard of that many rows: the gather index is wide enough, and the one shard
    is read in place (no copy of its rows)."""
    cfg = impl.PackConfig()
    plan = Plan(torch.tensor([3, 5]), torch.tensor([total - 8, 8]), torch.tensor([0, 3, 8]),
                torch.tensor([0, total - 8, total]), 5, total, total, 2)
    shard = torch.full((1, 2), 7.0).expand(total, 2)  # no memory: every row is [7, 7]
    got = impl.unpack_thd([shard], plan, cfg)
    assert [tuple(t.shape) for t in got] == [(3, 2), (5, 2)]
    assert all(bool((t == 7.0).all()) for t in got)


@pytest.mark.rules("R-ERR-11")
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("field", ["seqlens_padded", "cu_seqlens_padded"])
def test_plan_with_an_entry_short_is_rejected_before_reading(device: str, field: str) -> None:
    """A plan whose padded lengths or offsets have one entry too few or too many is a
    ValueError about the arrays' lengths, found from the shapes alone (so also on meta)."""
    cfg = impl.PackConfig(cp_size=2)
    plan = _forged(impl.plan_thd([3, 5], cfg), torch.int32, device)
    shards = [impl.pack_thd(SEQS[:2], cfg, r)[0].to(device) for r in range(2)]
    arrays = {f: getattr(plan, f) for f in PLAN_FIELDS}
    for cut in (arrays[field][:-1], torch.cat((arrays[field], arrays[field][-1:]))):
        bad = Plan(**{**arrays, field: cut}, max_seqlen=plan.max_seqlen, total=plan.total,
                   local_rows=plan.local_rows, num_seqs=plan.num_seqs)
        with pytest.raises(ValueError, match="plan arrays have inconsistent lengths"):
            impl.unpack_thd(shards, bad, cfg)


@pytest.mark.rules("R-MEG-3")
def test_engine_postprocess_output_pads_to_the_longest_sequence(megatron: Megatron) -> None:
    """The nested tensor postprocess_thd_engine returns carries the longest sequence's length:
    torch.nested.to_padded_tensor pads it to that length, not to the total."""
    nt = torch.nested.nested_tensor(SEQS, layout=torch.jagged)
    rows, params, _ = megatron.adapter.preprocess_thd_engine(nt)
    out = megatron.adapter.postprocess_thd_engine(rows, params, nt, 3)
    padded = torch.nested.to_padded_tensor(out, -1.0)
    assert padded.shape == (3, 5)
    assert padded.tolist() == [s.tolist() + [-1.0] * (5 - len(s)) for s in SEQS]
