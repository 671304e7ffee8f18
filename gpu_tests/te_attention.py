"""TransformerEngine's THD attention, imported lazily and defensively (every API is
feature-detected), with a switch that forces its backend."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from .fallbacks import AttnMeta


# TransformerEngine (imported lazily and defensively: every API is feature-detected).
def import_te() -> tuple[Any, str | None]:
    """(transformer_engine.pytorch, None), or (None, why it cannot be used)."""
    try:
        import transformer_engine.pytorch as te
    except Exception as e:  # ImportError, or a broken CUDA extension raising OSError/RuntimeError
        return None, f"transformer_engine.pytorch is not importable: {type(e).__name__}: {e}"
    return te, None


def te_version() -> str:
    """TE's version string, or 'absent'."""
    try:
        import transformer_engine as te_root
    except Exception:
        return "absent"
    return str(getattr(te_root, "__version__", "unknown"))


_TE_BACKEND_CACHE_MODULES = (
    "transformer_engine.pytorch.attention.dot_product_attention.dot_product_attention",
    "transformer_engine.pytorch.attention.dot_product_attention.utils",
    "transformer_engine.pytorch.attention",
    "transformer_engine.pytorch.dot_product_attention",
)

TE_FORCE_ENV = {
    # Only cuDNN fused attention: the backend that supports padding between THD sequences and
    # promises zero output on pad rows (domain facts §1).
    "fused": {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"},
    "auto": {},
}


def te_reset_backend_cache() -> None:
    """Make TE re-select its attention backend (it caches the choice per attention params, and
    the NVTE_* switches are not part of the cache key)."""
    for name in _TE_BACKEND_CACHE_MODULES:
        cache = getattr(sys.modules.get(name), "_attention_backends", None)
        if isinstance(cache, dict):
            if "attention_params" in cache:
                cache["attention_params"] = None
            if "backend_selection_requires_update" in cache:
                cache["backend_selection_requires_update"] = True


@contextlib.contextmanager
def te_backend(mode: str) -> Iterator[None]:
    """Force TE's attention backend for the duration (``fused`` or ``auto``)."""
    env = TE_FORCE_ENV[mode]
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    te_reset_backend_cache()
    try:
        yield
    finally:
        for k, val in old.items():
            if val is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = val
        te_reset_backend_cache()


class TEAttention:
    """TE ``DotProductAttention(qkv_format="thd", attn_mask_type="padding_causal")`` on a packed
    buffer, called with the plan's metadata in either convention."""

    def __init__(self, heads: int, head_dim: int, **te_kwargs: Any) -> None:
        te, why = import_te()
        if te is None:
            raise RuntimeError(why)
        self.module = te.DotProductAttention(
            heads,
            head_dim,
            attention_dropout=0.0,
            qkv_format="thd",
            attn_mask_type="padding_causal",
            **te_kwargs,
        )
        if torch.cuda.is_available():
            self.module = self.module.cuda()
        self.forward_params = set(inspect.signature(self.module.forward).parameters)

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttnMeta
    ) -> torch.Tensor:
        kwargs: dict[str, Any] = {
            "cu_seqlens_q": meta.cu_seqlens_q,
            "cu_seqlens_kv": meta.cu_seqlens_kv,
            "cu_seqlens_q_padded": meta.cu_seqlens_q_padded,
            "cu_seqlens_kv_padded": meta.cu_seqlens_kv_padded,
            "max_seqlen_q": meta.max_seqlen_q,
            "max_seqlen_kv": meta.max_seqlen_kv,
        }
        if "pad_between_seqs" in self.forward_params:
            # Explicit since TE 2.2; older auto-detection missed tail padding (domain facts §1).
            kwargs["pad_between_seqs"] = meta.pad_between_seqs
        out = self.module(q, k, v, **kwargs)
        return out.view(q.shape)  # TE returns [T, H * D] for thd
