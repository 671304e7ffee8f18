"""One packed forward/backward through an attention callable, with the real rows read back
from the plan alone (R-META-6), not by impl's unpack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .cases import QKV
from .fallbacks import AttnFn, AttnMeta, attn_meta
from .fp32_reference import Result


def real_rows(packed: torch.Tensor, plan: Any) -> list[torch.Tensor]:
    """Each real sequence's rows of a cp=1 buffer, read straight from the plan (R-META-6): the
    first ``num_seqs`` entries (R-META-7); entries past them hold no real rows (R-STATIC-1)."""
    start = torch.as_tensor(plan.cu_seqlens_padded).tolist()
    lens = torch.as_tensor(plan.seqlens).tolist()[: int(plan.num_seqs)]
    return [packed[s : s + n] for s, n in zip(start, lens, strict=False)]


def pad_row_mask(plan: Any, device: torch.device | str) -> torch.Tensor:
    """Bool ``[total]``: True on padding rows of a cp=1 buffer (R-ALIGN-4, R-TOTAL-5)."""
    mask = torch.ones(int(plan.total), dtype=torch.bool)
    for s, n in zip(
        torch.as_tensor(plan.cu_seqlens_padded).tolist(),
        torch.as_tensor(plan.seqlens).tolist(),
        strict=False,
    ):
        mask[s : s + n] = False
    return mask.to(device)


@dataclass
class PackedRun:
    """One packed forward/backward: the plan, packed output/grads, and per-sequence real rows."""

    plan: Any
    meta: AttnMeta
    out: torch.Tensor
    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor
    real: Result


def run_packed(impl_mod: Any, qkv: QKV, config: Any, convention: str, attn: AttnFn) -> PackedRun:
    """Pack q/k/v/dout with impl (cp=1), run ``attn`` forward and backward, read real rows back."""
    q, _, plan = impl_mod.pack_thd(qkv.q, config, 0)
    k, _, plan_k = impl_mod.pack_thd(qkv.k, config, 0)
    v, _, _ = impl_mod.pack_thd(qkv.v, config, 0)
    dout, _, _ = impl_mod.pack_thd(qkv.dout, config, 0)  # pad rows get 0 (R-ROW-2)
    assert int(plan.total) == q.shape[0] == k.shape[0], "pack_thd rows disagree with plan.total"
    assert torch.equal(
        torch.as_tensor(plan.cu_seqlens_padded), torch.as_tensor(plan_k.cu_seqlens_padded)
    )
    device = qkv.q[0].device if qkv.q else q.device
    q, k, v, dout = (t.to(device) for t in (q, k, v, dout))
    meta = attn_meta(plan, convention, device)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attn(q, k, v, meta)
    out.backward(dout)
    assert q.grad is not None and k.grad is not None and v.grad is not None
    out = out.detach()
    real = Result(
        out=real_rows(out, plan),
        dq=real_rows(q.grad, plan),
        dk=real_rows(k.grad, plan),
        dv=real_rows(v.grad, plan),
    )
    return PackedRun(plan, meta, out, q.grad, k.grad, v.grad, real)
