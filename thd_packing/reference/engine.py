"""verl's Megatron engine flags resolved to a PackConfig, or rejected (spec §10)."""

from __future__ import annotations

from typing import Any

from .config import PackConfig
from .validation import as_bool, as_size


def resolve_engine_config(
    *,
    tp_size: Any = 1,
    cp_size: Any = 1,
    cp_layout: Any = "zigzag",
    use_fp8_padding: Any = False,
    min_local_rows: Any = None,
    pad_to_length: Any = False,
    pad_to_length_bucket: Any = 512,
    use_remove_padding: Any = True,
    dynamic_context_parallel: Any = False,
    distillation_use_topk: Any = False,
    router_replay: Any = False,
    max_num_seqs: Any = None,
    max_seqlen: Any = "exact",
) -> PackConfig:
    """R-ENGINE-1..7, checked in rule order."""
    # R-ENGINE-1: types first; the bucket is validated even when unused (R-ERR-3).
    as_bool("pad_to_length", pad_to_length)
    as_bool("use_remove_padding", use_remove_padding)
    as_bool("dynamic_context_parallel", dynamic_context_parallel)
    as_bool("distillation_use_topk", distillation_use_topk)
    as_bool("router_replay", router_replay)
    as_bool("use_fp8_padding", use_fp8_padding)
    bucket = as_size("pad_to_length_bucket", pad_to_length_bucket)

    if dynamic_context_parallel and not use_remove_padding:  # R-ENGINE-2
        raise ValueError("dynamic_context_parallel requires use_remove_padding=True")
    if dynamic_context_parallel and pad_to_length:  # R-ENGINE-3
        raise NotImplementedError("dynamic_context_parallel does not support pad_to_length")
    if pad_to_length and not use_remove_padding:  # R-ENGINE-4
        raise ValueError(
            "pad_to_length=True requires use_remove_padding=True: the bucket applies to packed "
            "(THD) micro-batches only, and ignoring it would silently give dynamic shapes"
        )
    if pad_to_length and distillation_use_topk:  # R-ENGINE-5
        raise RuntimeError("pad_to_length is not supported with top-K distillation")
    if pad_to_length and router_replay:  # R-ENGINE-6
        raise RuntimeError("pad_to_length is not supported with router replay")

    return PackConfig(  # R-ENGINE-7
        tp_size=tp_size,
        cp_size=cp_size,
        cp_layout=cp_layout,
        fp8=use_fp8_padding,
        bucket=bucket if pad_to_length else None,
        min_local_rows=min_local_rows,
        max_num_seqs=max_num_seqs,
        max_seqlen=max_seqlen,
    )
