"""What every Megatron-adapter target shares: the PackedSeqParams view and the gradient probe."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..protocol import Meta


def import_megatron_core() -> None:
    """megatron-core imported once, with the warnings its own import raises (torch.jit and
    inference deprecations, TE or Apex not installed) silenced: the suite's loading of it
    triggers them, not the packer under test."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(megatron|torch\.jit)\b")
        import megatron.core  # noqa: F401


import_megatron_core()

PARAMS_FIELDS = ("qkv_format", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
                 "cu_seqlens_kv_padded", "max_seqlen_q", "max_seqlen_kv", "cp_partition_mode")


class KwargsParams:
    """A PackedSeqParams stand-in whose constructor takes `**kwargs` (as verl's own tests and
    other trainers' tests stub it): it keeps exactly the fields it was given."""

    def __init__(self, **fields: Any) -> None:
        self.given = sorted(fields)
        for key, value in fields.items():
            setattr(self, key, value)


def params_dict(params: Any) -> dict[str, Any]:
    """The PackedSeqParams fields R-MEG-1/2 speak of, as NumPy (absent fields left out)."""
    out: dict[str, Any] = {}
    for key in PARAMS_FIELDS:
        if hasattr(params, key):
            value = getattr(params, key)
            out[key] = value.numpy() if isinstance(value, torch.Tensor) else value
    if isinstance(params, KwargsParams):
        out["given"] = params.given
    return out


def cu_params(cu_padded: Any) -> Any:
    """PackedSeqParams in verl's convention: every cu_seqlens is the padded one (R-MEG-1)."""
    from megatron.core.packed_seq_params import PackedSeqParams

    cu = torch.as_tensor(np.asarray(cu_padded), dtype=torch.int32)
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                           cu_seqlens_q_padded=cu, cu_seqlens_kv_padded=cu)


def thd_params(meta: Meta) -> Any:
    """`cu_params` of the plan's cu_seqlens_padded."""
    return cu_params(meta["cu_seqlens_padded"])


def unpack_with_grad(
    rows: np.ndarray, post: Callable[[torch.Tensor], Any]
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Run `post` (a postprocess over the live group) on `rows[None]` and backprop a sum.

    The gradient on the local rows proves they stayed in the autograd graph (R-MEG-3): 1 on real
    rows, 0 on padding. Non-floating rows cannot carry a gradient (None).
    """
    local = torch.from_numpy(np.ascontiguousarray(rows))[None]
    grad_ok = local.is_floating_point()
    if grad_ok:
        local = local.clone().requires_grad_(True)
    parts = list(post(local).unbind())
    grad = None
    if grad_ok and local.numel() == 0:
        grad = np.zeros(rows.shape, dtype=rows.dtype)  # nothing to differentiate
    elif grad_ok:
        torch.stack([p.sum() for p in parts]).sum().backward()
        assert local.grad is not None
        grad = local.grad[0].numpy()
    return [p.detach().numpy() for p in parts], grad
