"""impl's public API under inputs a trainer can pass beyond the protocol's plain arrays.

Autograd through a flat `values` + `lengths=` batch and through a nested tensor, a broadcast
(stride-0) values buffer past 2**31 rows, config fields given as NumPy or tensor scalars and int
subclasses, `lengths=` together with `mask=`, and a `PackedSeqParams` of an older megatron-core
(no padded offsets) handed back to the postprocess. Expected values come from the spec's rules
(each real token once across the ranks, R-ROW-1; padding rows carry no data, R-ROW-2), not from
impl's own output, except where a test checks that two input forms agree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

import impl

CONFIGS = [
    impl.PackConfig(),
    impl.PackConfig(tp_size=2, cp_size=2),
    impl.PackConfig(cp_size=2, cp_layout="contiguous", bucket=16),
]


def _token_counts(lengths: list[int], need_roll: bool) -> torch.Tensor:
    """How often each token is read into a real row over all ranks (R-ROW-1, R-ROLL-1): once,
    and under `need_roll` every token but a sequence's first (row j holds token j + 1)."""
    counts = []
    for n in lengths:
        counts += [0 if need_roll and j == 0 else 1 for j in range(n)]
    return torch.tensor(counts, dtype=torch.float32)


@pytest.mark.rules("R-IN-1", "R-ROW-1", "R-ROW-2")
@pytest.mark.parametrize("config", CONFIGS, ids=["cp1", "zigzag-tp2-cp2", "contiguous-bucket"])
@pytest.mark.parametrize("need_roll", [False, True])
def test_flat_values_with_lengths_backpropagate(config: impl.PackConfig, need_roll: bool) -> None:
    """Autograd through flat values + `lengths=`: same rows, grad 1 per real read (R-ROW-1/2)."""
    lengths = [3, 0, 5, 6]
    x = torch.arange(2 * sum(lengths), dtype=torch.float32).reshape(-1, 2).requires_grad_()
    loss = torch.zeros(())
    for rank in range(config.cp_size):
        rows, pos, _ = impl.pack_thd(x, config, rank, lengths=lengths, need_roll=need_roll,
                                     pad_value=-1.0)
        with torch.no_grad():
            want, want_pos, _ = impl.pack_thd(x, config, rank, lengths=lengths,
                                              need_roll=need_roll, pad_value=-1.0)
        assert torch.equal(rows.detach(), want) and torch.equal(pos, want_pos)
        loss = loss + rows.sum()
    loss.backward()
    assert x.grad is not None
    assert torch.equal(x.grad, _token_counts(lengths, need_roll)[:, None].expand(-1, 2))


@pytest.mark.rules("R-IN-1", "R-ROW-1")
@pytest.mark.parametrize("config", CONFIGS[1:], ids=["zigzag-tp2-cp2", "contiguous-bucket"])
def test_nested_leaf_that_requires_grad_gets_its_gradient(config: impl.PackConfig) -> None:
    """A nested leaf that requires grad gets 1 per token read into a row (R-ROW-1, R-ROLL-1)."""
    lengths = [4, 1, 7]
    seqs = [torch.arange(n, dtype=torch.float32) + 10 * k for k, n in enumerate(lengths)]
    nt = torch.nested.nested_tensor(seqs, layout=torch.jagged, requires_grad=True)
    loss = sum(impl.pack_thd(nt, config, r, need_roll=True)[0].sum()
               for r in range(config.cp_size))
    assert isinstance(loss, torch.Tensor)
    loss.backward()
    assert nt.grad is not None
    got = torch.cat(list(nt.grad.unbind()))
    assert torch.equal(got, _token_counts(lengths, True))


@pytest.mark.rules("R-IN-6", "R-ROW-1", "R-POS-2")
def test_broadcast_values_past_int32_rows_with_autograd() -> None:
    """A stride-0 buffer past 2**31 rows (autograd, nested with gaps) is gathered (R-IN-6)."""
    base = torch.tensor([0.0, 5.0], requires_grad=True)
    values = base[1:].expand(2**31 + 8)  # no memory: every row is base[1]
    offsets = torch.tensor([0, 2**31, 2**31 + 8])
    nt = torch.nested.nested_tensor_from_jagged(values, offsets=offsets,
                                                lengths=torch.tensor([3, 8]))
    rows, pos, plan = impl.pack_thd(nt, impl.PackConfig(tp_size=2), 0, pad_value=-1.0)
    assert plan.seqlens.tolist() == [3, 8] and plan.total == 12
    assert rows.tolist() == [5.0] * 3 + [-1.0] + [5.0] * 8
    assert pos.tolist() == [0, 1, 2, 3, *range(8)]


INT_FIELDS = ("tp_size", "cp_size", "bucket", "min_local_rows", "max_num_seqs", "ignore_index")


class _Count(int):
    """A trainer's own int subclass (e.g. a config system's typed integer)."""


class bool_(int):  # noqa: N801 - named like NumPy's bool on purpose
    """An int subclass that only shares its name with NumPy's bool: an integer (spec §0)."""


@pytest.mark.rules("R-IN-3")
@pytest.mark.parametrize("make", [np.int64, np.int32, torch.tensor, _Count, bool_],
                         ids=["np.int64", "np.int32", "tensor-0d", "int-subclass", "named-bool_"])
def test_config_fields_from_integer_likes_are_ints(make: Any) -> None:
    """Integer-like config fields are stored as ints: equal and hash like ints (R-IN-3)."""
    plain: dict[str, Any] = {name: 3 for name in INT_FIELDS}
    given: dict[str, Any] = {name: make(3) for name in INT_FIELDS}
    config = impl.PackConfig(**given)
    for name in INT_FIELDS:
        assert type(getattr(config, name)) is int, name
    assert config == impl.PackConfig(**plain)
    assert hash(config) == hash(impl.PackConfig(**plain))
    fixed = impl.PackConfig(fixed_total=make(3))  # exclusive with bucket: on its own
    assert type(fixed.fixed_total) is int and fixed == impl.PackConfig(fixed_total=3)


@pytest.mark.rules("R-ERR-1")
@pytest.mark.parametrize("value", [True, np.True_, np.array(True), torch.tensor(True)],
                         ids=["bool", "np.bool", "ndarray-0d", "tensor-0d"])
def test_a_bool_as_a_size_is_refused_as_a_bool(value: Any) -> None:
    """Spec section 0: a bool is no integer, whichever library made it. Each bool-like size
    gets the same TypeError, saying it is a bool (NumPy refuses to index with one anyway, but
    its own words would blame an ndarray or an index), naming the field and the value."""
    with pytest.raises(TypeError, match=r"^tp_size must be an integer, not a bool: tp_size="):
        impl.PackConfig(tp_size=value)


@pytest.mark.rules("R-IN-7", "R-ERR-1")
def test_lengths_with_mask_is_a_type_error() -> None:
    """`lengths=` with `mask=` raises TypeError naming both (R-IN-7, R-ERR-1)."""
    x = torch.arange(8).reshape(2, 4)
    mask = torch.ones(2, 4, dtype=torch.bool)
    with pytest.raises(TypeError, match="lengths= and mask="):
        impl.pack_thd(x, impl.PackConfig(), 0, mask=mask, lengths=[4, 4])


@dataclasses.dataclass
class _ParamsWithoutPadded:
    """A PackedSeqParams of megatron-core before the padded offsets (0.7-0.9): no such field."""

    qkv_format: Any = None
    cu_seqlens_q: Any = None
    cu_seqlens_kv: Any = None
    max_seqlen_q: Any = None
    max_seqlen_kv: Any = None


@pytest.mark.rules("R-MEG-3", "R-MEG-4", "R-MEG-9")
def test_postprocess_reads_params_without_padded_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Params without `cu_seqlens_q_padded` (R-MEG-4) still unpack (R-MEG-3, R-MEG-9)."""
    pytest.importorskip("megatron.core")
    from megatron.core import packed_seq_params, parallel_state

    from impl import megatron as adapter

    for name, value in (("get_tensor_model_parallel_world_size", 1),
                        ("get_context_parallel_world_size", 1), ("get_context_parallel_rank", 0)):
        monkeypatch.setattr(parallel_state, name, lambda value=value: value)
    monkeypatch.setattr(packed_seq_params, "PackedSeqParams", _ParamsWithoutPadded)
    seqs = [torch.arange(n, dtype=torch.float32) + 10 * k for k, n in enumerate([3, 5])]
    nt = torch.nested.nested_tensor(seqs, layout=torch.jagged)
    rows, params, _ = adapter.preprocess_thd_engine(nt)
    assert not hasattr(params, "cu_seqlens_q_padded")
    out = adapter.postprocess_thd_engine(rows, params, nt, 2)
    assert [t.tolist() for t in out.unbind()] == [s.tolist() for s in seqs]
    x = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 0]], dtype=torch.bool)
    rows, params = adapter.preprocess_packed_seqs(x, mask)
    assert not hasattr(params, "cu_seqlens_q_padded")
    back = adapter.postprocess_packed_seqs(rows, params, mask, 2, 6)
    assert torch.equal(back, torch.where(mask, x, 0.0))


@pytest.mark.rules("R-TOTAL-6", "R-ERR-8")
@pytest.mark.parametrize("total", [2**31 - 1, 2**31 + 8], ids=["int32-max", "past-int32"])
@pytest.mark.parametrize("entry", ["postprocess_thd_engine", "postprocess_packed_seqs"])
def test_postprocess_takes_a_forged_total_up_to_int32_max(monkeypatch: pytest.MonkeyPatch,
                                                          entry: str, total: int) -> None:
    """Params whose padded total exceeds INT32_MAX are a ValueError naming the total, even when
    the output (stride 0) has that many rows and could be unpacked; INT32_MAX itself unpacks."""
    pytest.importorskip("megatron.core")
    from megatron.core import parallel_state

    from impl import megatron as adapter

    for name, value in (("get_tensor_model_parallel_world_size", 1),
                        ("get_context_parallel_world_size", 1), ("get_context_parallel_rank", 0)):
        monkeypatch.setattr(parallel_state, name, lambda value=value: value)
    x = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1]], dtype=torch.bool)
    nt = torch.nested.nested_tensor([x[0, :3], x[1, 1:]], layout=torch.jagged)
    if entry == "postprocess_thd_engine":
        _, params, _ = adapter.preprocess_thd_engine(nt)
    else:
        _, params = adapter.preprocess_packed_seqs(x, mask)
    params.cu_seqlens_q_padded = torch.tensor([0, 3, total])  # int64: int32 cannot hold all
    output = torch.ones(1, 1).expand(1, total)  # [1, R] of R = total rows, no memory

    def post() -> torch.Tensor:
        if entry == "postprocess_thd_engine":
            return adapter.postprocess_thd_engine(output, params, nt, 2).values()
        return adapter.postprocess_packed_seqs(output, params, mask, 2, 6)[mask]

    if total > 2**31 - 1:
        with pytest.raises(ValueError, match=rf"padded total {total} .*INT32_MAX"):
            post()
    else:
        assert post().tolist() == [1.0] * 8  # the 3 + 5 real rows, read from the output


def _forged(plan: impl.Plan, dtype: torch.dtype) -> impl.Plan:
    """The same plan with its arrays in another integer dtype (a plan built by the caller)."""
    return impl.Plan(plan.seqlens.to(dtype), plan.seqlens_padded.to(dtype),
                     plan.cu_seqlens.to(dtype), plan.cu_seqlens_padded.to(dtype),
                     plan.max_seqlen, plan.total, plan.local_rows, plan.num_seqs)


@pytest.mark.rules("R-LABEL-3", "R-SHARD-1", "R-SHARD-3")
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8, torch.uint16])
@pytest.mark.parametrize("cp_size", [1, 2])
def test_loss_mask_of_a_plan_in_any_integer_dtype(dtype: torch.dtype, cp_size: int) -> None:
    """loss_mask of a plan in any integer dtype: True at rows with a next token (R-LABEL-3)."""
    config = impl.PackConfig(tp_size=2 // cp_size, cp_size=cp_size, cp_layout="contiguous")
    plan = _forged(impl.plan_thd([3, 0, 5, 1, 0], config), dtype)
    # A = 2: padded lengths [4, 0, 6, 2, 0], total 12; contiguous ranks split the buffer in halves.
    want = [1, 1, 0, 0] + [1, 1, 1, 1, 0, 0] + [0, 0]
    rows = 12 // cp_size
    for rank in range(cp_size):
        got = impl.loss_mask(plan, config, rank)
        assert got.dtype == torch.bool
        assert got.tolist() == [bool(v) for v in want[rank * rows:(rank + 1) * rows]]


@pytest.mark.rules("R-LABEL-3", "R-ERR-1", "R-ERR-4")
def test_loss_mask_is_a_clean_bool_and_names_bad_arguments() -> None:
    """loss_mask: bytes of 0 or 1 (a bool any consumer may reinterpret), and each bad argument
    a typed error naming the argument and what was given."""
    cfg = impl.PackConfig(cp_size=2, cp_layout="contiguous", seq_align="none")
    plan = impl.plan_thd([3, 1, 2], cfg)
    for rank in range(2):
        assert int(impl.loss_mask(plan, cfg, rank).view(torch.uint8).max()) <= 1
    with pytest.raises(TypeError, match=r"\bplan\b.*\bstr\b"):
        impl.loss_mask("plan", cfg, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\bconfig\b.*\bdict\b"):
        impl.loss_mask(plan, {}, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\bcp_rank\b"):
        impl.loss_mask(plan, cfg, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"plan\.total 8 .*\b2\b"):
        impl.loss_mask(dataclasses.replace(plan, total=8), cfg, 0)
