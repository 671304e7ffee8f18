"""impl/megatron.py driven through a fake Megatron parallel state (optionally a real group)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from .protocol import Config, Meta

_GETTERS = ("get_tensor_model_parallel_world_size", "get_context_parallel_world_size",
            "get_context_parallel_rank", "get_context_parallel_group")


@contextlib.contextmanager
def fake_parallel_state(tp: int, cp: int, rank: int, group: Any = None) -> Iterator[None]:
    """Patch megatron.core.parallel_state's getters for the duration of one call."""
    from megatron.core import parallel_state

    values = {"get_tensor_model_parallel_world_size": tp, "get_context_parallel_world_size": cp,
              "get_context_parallel_rank": rank, "get_context_parallel_group": group}
    saved = {name: getattr(parallel_state, name) for name in _GETTERS}
    try:
        for name, value in values.items():
            setattr(parallel_state, name, lambda *a, _v=value, **k: _v)
        yield
    finally:
        for name, fn in saved.items():
            setattr(parallel_state, name, fn)


def _full(config: Config) -> Config:
    return {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False, "bucket": None,
            "min_local_rows": None, **config}


def _params_dict(params: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("qkv_format", "cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
                "cu_seqlens_kv_padded", "max_seqlen_q", "max_seqlen_kv", "cp_partition_mode"):
        if hasattr(params, key):
            value = getattr(params, key)
            out[key] = value.numpy() if isinstance(value, torch.Tensor) else value
    return out


def preprocess(seqs: list[np.ndarray], config: Config, cp_rank: int, *,
               need_roll: bool = False) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    from impl import megatron

    cfg = _full(config)
    nested = torch.nested.nested_tensor(
        [torch.from_numpy(np.ascontiguousarray(s)) for s in seqs], layout=torch.jagged
    )
    # Only non-default arguments are passed, as a caller relying on verl's defaults would:
    # a wrong default in the adapter's signature then changes the result.
    kwargs = {"need_roll": need_roll, "use_fp8_padding": cfg["fp8"],
              "min_local_rows": cfg["min_local_rows"], "pad_to_length_bucket": cfg["bucket"],
              "cp_layout": cfg["cp_layout"]}
    defaults = {"need_roll": False, "use_fp8_padding": False, "min_local_rows": None,
                "pad_to_length_bucket": None, "cp_layout": "zigzag"}
    kwargs = {k: v for k, v in kwargs.items() if v != defaults[k] or type(v) is not
              type(defaults[k])}
    with fake_parallel_state(cfg["tp_size"], cfg["cp_size"], cp_rank):
        rows, params, pos = megatron.preprocess_thd_engine(nested, **kwargs)
    assert pos is not None  # pre_process=True
    return rows.numpy(), _params_dict(params), pos.numpy()


def distributed_unpack(rows: np.ndarray, meta: Meta, config: Config, cp_rank: int,
                       group: Any) -> tuple[list[np.ndarray], np.ndarray | None]:
    """postprocess_thd_engine over the live group; the gradient proves R-MEG-3's autograd."""
    from megatron.core.packed_seq_params import PackedSeqParams

    from impl import megatron

    cfg = _full(config)
    cu = torch.as_tensor(np.asarray(meta["cu_seqlens_padded"]), dtype=torch.int32)
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu,
                             cu_seqlens_q_padded=cu, cu_seqlens_kv_padded=cu)
    lengths = [int(x) for x in np.asarray(meta["seqlens"])]
    input_ids = torch.nested.nested_tensor([torch.zeros(n) for n in lengths],
                                           layout=torch.jagged)
    local = torch.from_numpy(np.ascontiguousarray(rows))[None]
    grad_ok = local.is_floating_point()
    if grad_ok:
        local = local.clone().requires_grad_(True)
    with fake_parallel_state(cfg["tp_size"], cfg["cp_size"], cp_rank, group):
        layout = {} if cfg["cp_layout"] == "zigzag" else {"cp_layout": cfg["cp_layout"]}
        out = megatron.postprocess_thd_engine(local, params, input_ids, len(lengths), **layout)
    parts = list(out.unbind())
    grad = None
    if grad_ok and local.numel() == 0:
        grad = np.zeros(rows.shape, dtype=rows.dtype)  # nothing to differentiate
    elif grad_ok:
        torch.stack([p.sum() for p in parts]).sum().backward()
        assert local.grad is not None
        grad = local.grad[0].numpy()
    return [p.detach().numpy() for p in parts], grad
