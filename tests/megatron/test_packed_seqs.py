"""verl's mask entry points in the adapter: preprocess_packed_seqs / postprocess_packed_seqs
(R-MEG-8, R-MEG-9), and impl.pack_thd's padded-batch-plus-mask form they are built on.

Pinned tables are what the verl 0.9.1 wheel returned for the same call (written down once);
the sweep runs the wheel itself (skipped without verl): every rank, tp 1-3, cp 1-4, FP8 on and
off, left, right and scattered masks, trailing dims, and the round trip.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
import torch

import impl

pytest.importorskip("megatron.core")
from megatron.core import packed_seq_params as psp_module  # noqa: E402

from impl import masked  # noqa: E402
from impl import megatron as adapter  # noqa: E402

from ._fake_mpu import FakeParallelState, gather_from  # noqa: E402
from .test_verl_live import needs_verl  # noqa: E402

X = torch.arange(1, 25).reshape(3, 8)
MASK = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0, 0],
                     [0, 1, 0, 1, 1, 0, 0, 1]], dtype=torch.bool)  # left, right, scattered
# (tp, cp, use_fp8_padding): verl 0.9.1's cu_seqlens_q_padded, max_seqlen_q and rows per rank
# (FP8: the first 20 of 128 rows).
VERL = {
    (1, 1, False): ([0, 5, 8, 12], 5, {0: [4, 5, 6, 7, 8, 9, 10, 11, 18, 20, 21, 24]}),
    (1, 2, False): ([0, 8, 12, 16], 8, {0: [4, 5, 0, 0, 9, 0, 18, 24],
                                        1: [6, 7, 8, 0, 10, 11, 20, 21]}),
    (2, 2, False): ([0, 8, 16, 24], 8, {0: [4, 5, 0, 0, 9, 10, 0, 0, 18, 20, 0, 0],
                                        1: [6, 7, 8, 0, 11, 0, 0, 0, 21, 24, 0, 0]}),
    (1, 1, True): ([0, 16, 32, 128], 96, {0: [4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                              9, 10, 11, 0]}),
}


@pytest.mark.rules("R-MEG-8", "R-MEG-1")
@pytest.mark.parametrize("key", sorted(VERL))
def test_pinned_verl_values(state: FakeParallelState, key: tuple[int, int, bool]) -> None:
    tp, cp, fp8 = key
    cu, max_seqlen, ranks = VERL[key]
    state.tp, state.cp = tp, cp
    for rank, want in ranks.items():
        state.rank = rank
        rows, params = adapter.preprocess_packed_seqs(X, MASK, use_fp8_padding=fp8)
        assert rows.shape[0] == 1 and rows[0].tolist()[:len(want)] == want
        assert rows.shape[1] == cu[-1] // cp
        for key_ in ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
                     "cu_seqlens_kv_padded"):
            got = getattr(params, key_)
            assert got.dtype == torch.int32 and got.tolist() == cu
        assert params.max_seqlen_q == params.max_seqlen_kv == max_seqlen
        assert params.qkv_format == "thd"


@pytest.mark.rules("R-MEG-8", "R-MEG-9")
def test_pre_and_post_process_false(state: FakeParallelState) -> None:
    out, params = adapter.preprocess_packed_seqs(X, MASK, pre_process=False)
    assert out is X and params.cu_seqlens_q_padded.tolist() == [0, 5, 8, 12]
    y = torch.zeros(1, 12)
    assert adapter.postprocess_packed_seqs(y, params, MASK, 3, 8, post_process=False) is y


@pytest.mark.rules("R-MEG-9")
def test_round_trip_and_gradient(state: FakeParallelState) -> None:
    """Every rank gets the masked tokens back at their places, 0 elsewhere; the local rows
    carry gradient 1 where real, through exactly one all_gather over the CP group."""
    state.tp, state.cp, state.group = 2, 3, object()
    x = X.to(torch.float32)[..., None].repeat(1, 1, 2)
    shards = []
    for rank in range(3):
        state.rank = rank
        shards.append(adapter.preprocess_packed_seqs(x, MASK)[0])
    params = adapter.preprocess_packed_seqs(x, MASK, pre_process=False)[1]
    want = torch.where(MASK[..., None], x, 0)
    for rank in range(3):
        state.rank = rank
        local = shards[rank].clone().requires_grad_()
        with gather_from(shards, state.group):
            out = adapter.postprocess_packed_seqs(local, params, MASK, 3, 8)
        assert torch.equal(out, want)
        out.sum().backward()
        assert local.grad is not None
        real = (shards[rank] != 0).to(torch.float32)  # the tokens are non-zero
        assert torch.equal(local.grad, real)


@needs_verl
@pytest.mark.rules("R-MEG-8", "R-MEG-9")
def test_sweep_against_the_wheel(state: FakeParallelState) -> None:
    """Every rank, tp 1-3, cp 1-4, FP8 on and off, left / right / scattered masks, trailing
    dims: rows, PackedSeqParams and postprocess equal verl 0.9.1's; the round trip returns
    the masked tokens."""
    from thd_packing.peers.verl import FakeParallelState, load_util

    util = load_util()
    rng = random.Random(5)
    combos = itertools.product((1, 2, 3), (1, 2, 3, 4), (False, True),
                               ("left", "right", "scattered"), ((), (3,)))
    for tp, cp, fp8, pattern, trail in combos:
        b, s = rng.randint(1, 4), rng.randint(1, 12)
        mask = torch.zeros(b, s, dtype=torch.bool)
        for i in range(b):
            n = rng.randint(0, s)
            if pattern == "left":
                mask[i, s - n:] = n > 0
            elif pattern == "right":
                mask[i, :n] = True
            else:
                mask[i, torch.randperm(s)[:n]] = True
        x = torch.arange(1, b * s * max(1, len(trail) * 3) + 1).reshape(b, s, *trail)
        where = (tp, cp, fp8, pattern, trail, mask.tolist())
        v_rows, a_rows = [], []
        for rank in range(cp):
            util.mpu = FakeParallelState(tp, cp, rank)
            v, v_params = util.preprocess_packed_seqs(x, mask, use_fp8_padding=fp8)
            state.tp, state.cp, state.rank = tp, cp, rank
            a, a_params = adapter.preprocess_packed_seqs(x, mask, use_fp8_padding=fp8)
            assert torch.equal(v, a), where
            assert torch.equal(v_params.cu_seqlens_q_padded, a_params.cu_seqlens_q_padded)
            assert torch.equal(v_params.cu_seqlens_q, a_params.cu_seqlens_q), where
            assert v_params.max_seqlen_q == a_params.max_seqlen_q, where
            v_rows.append(v)
            a_rows.append(a)
        want = torch.where(mask.view(b, s, *([1] * len(trail))), x, 0)
        for rank in range(cp):
            state.rank, state.group = rank, None
            util.mpu = FakeParallelState(tp, cp, rank)
            with gather_from(v_rows, None):
                v_out = util.postprocess_packed_seqs(v_rows[rank], v_params, mask, b, s)
                a_out = adapter.postprocess_packed_seqs(a_rows[rank], a_params, mask, b, s)
            assert torch.equal(v_out, a_out) and torch.equal(a_out, want), where


@pytest.mark.rules("R-MEG-8")
@pytest.mark.parametrize("bad,cls,text", [
    (MASK.to(torch.int64), TypeError, "attention_mask must have dtype torch.bool"),
    (MASK[:, :5], ValueError, r"attention_mask has shape \(3, 5\)"),
    ([[True] * 8] * 3, TypeError, "attention_mask must be a bool torch.Tensor"),
])
def test_bad_masks(state: FakeParallelState, bad: Any, cls: type, text: str) -> None:
    """An integer mask (verl would index by position: erratum E-10), a mask of another shape,
    a list: typed errors naming attention_mask, before any data is read."""
    with pytest.raises(cls, match=text):
        adapter.preprocess_packed_seqs(X, bad)
    params = adapter.preprocess_packed_seqs(X, MASK, pre_process=False)[1]
    with pytest.raises(cls, match=text):
        adapter.postprocess_packed_seqs(torch.zeros(1, 12), params, bad, 3, 8)


@pytest.mark.rules("R-MEG-8")
def test_pack_thd_mask_form_equals_the_list_form() -> None:
    """impl.pack_thd(x, mask=...) packs x[i, mask[i]] exactly as the list of those sequences,
    under every convention and with labels and a pad value."""
    torch.manual_seed(1)
    x = torch.randint(0, 100, (5, 11, 2))
    mask = torch.rand(5, 11) < 0.5
    mask[1] = False
    seqs = [x[i, mask[i]] for i in range(5)]
    for cp, layout, tail, roll in itertools.product((1, 2, 3), ("zigzag", "contiguous"),
                                                    ("last", "segment"), (False, True)):
        cfg = impl.PackConfig(tp_size=2, cp_size=cp, cp_layout=layout, tail=tail, bucket=8)
        for rank in range(cp):
            a = impl.pack_thd(x, cfg, rank, mask=mask, need_roll=roll, pad_value=-1)
            b = impl.pack_thd(seqs, cfg, rank, need_roll=roll, pad_value=-1)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
            assert a[2].cu_seqlens_padded.tolist() == b[2].cu_seqlens_padded.tolist()


@pytest.mark.rules("R-MEG-8")
@pytest.mark.parametrize("runs", [True, False], ids=["one-run-per-row", "scattered"])
def test_mask_form_reads_the_mask_once(monkeypatch: pytest.MonkeyPatch, runs: bool) -> None:
    """On `meta` tensors (no data: any device-to-host read raises) the mask form packs with
    `mask_runs`' one copy (lengths and run starts) as its only host read, also on the scattered
    path: a CUDA mask costs one device-to-host copy."""
    calls = []

    def one_copy(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        calls.append(mask.device.type)
        return torch.tensor([2, 0, 5]), (torch.tensor([3, 0, 0]) if runs else None)

    monkeypatch.setattr(masked, "mask_runs", one_copy)
    x = torch.empty(3, 5, 2, device="meta", dtype=torch.int64)
    m = torch.empty(3, 5, device="meta", dtype=torch.bool)
    rows, pos, plan = impl.pack_thd(x, impl.PackConfig(cp_size=2), 1, mask=m)
    assert calls == ["meta"] and rows.shape == (6, 2) and rows.device.type == "meta"


@pytest.mark.rules("R-MEG-8")
def test_mask_runs_finds_every_run() -> None:
    """Lengths and run starts from 8-byte words agree with a per-row scan, for S a multiple of
    8 (the word path) and not (the byte path); a row with two runs gives None."""
    rng = torch.Generator().manual_seed(3)
    for s in (8, 24, 13, 64):
        for _ in range(30):
            lo = torch.randint(0, s, (6,), generator=rng)
            hi = torch.minimum(lo + torch.randint(0, s + 1, (6,), generator=rng), torch.tensor(s))
            cols = torch.arange(s)
            mask = (cols >= lo[:, None]) & (cols < hi[:, None])
            lengths, starts = masked.mask_runs(mask)
            assert lengths.tolist() == mask.sum(1).tolist()
            assert starts is not None
            for i in range(6):
                if lengths[i] > 0:
                    assert starts[i] == int(torch.nonzero(mask[i])[0])
        two = torch.zeros(2, s, dtype=torch.bool)
        two[0, 0] = two[0, s - 1] = True
        assert masked.mask_runs(two)[1] is None


@pytest.mark.rules("R-MEG-8", "R-MEG-9")
def test_real_single_process_group(real_group: None) -> None:
    """Real parallel state and the real PackedSeqParams: a round trip with gradients."""
    x = X.to(torch.float32).requires_grad_()
    rows, params = adapter.preprocess_packed_seqs(x, MASK)
    assert type(params) is psp_module.PackedSeqParams
    out = adapter.postprocess_packed_seqs(rows * 2, params, MASK, 3, 8)
    assert torch.equal(out, torch.where(MASK, 2 * X.to(torch.float32), 0))
    out.sum().backward()
    assert x.grad is not None and torch.equal(x.grad, 2 * MASK.to(torch.float32))
