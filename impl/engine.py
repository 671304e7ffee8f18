# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""`resolve_engine_config`: verl's Megatron engine flags to a `PackConfig` (spec §10)."""

from __future__ import annotations

from .config import PackConfig, as_integer


def resolve_engine_config(
    *,
    tp_size: int = 1,
    cp_size: int = 1,
    cp_layout: str = "zigzag",
    use_fp8_padding: bool = False,
    min_local_rows: int | None = None,
    pad_to_length: bool = False,
    pad_to_length_bucket: int = 512,
    use_remove_padding: bool = True,
    dynamic_context_parallel: bool = False,
    distillation_use_topk: bool = False,
    router_replay: bool = False,
    max_num_seqs: int | None = None,
    max_seqlen: str = "exact",
) -> PackConfig:
    """Map engine flags to a `PackConfig` or reject them, checks in rule order (R-ENGINE-1..7).

    `max_num_seqs` and `max_seqlen` have no verl flag; they pass through to the config, so a
    planned static configuration resolves here too.
    """
    flags = {
        "pad_to_length": pad_to_length,
        "use_remove_padding": use_remove_padding,
        "dynamic_context_parallel": dynamic_context_parallel,
        "distillation_use_topk": distillation_use_topk,
        "router_replay": router_replay,
        "use_fp8_padding": use_fp8_padding,
    }
    for name, value in flags.items():  # R-ENGINE-1
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {name}={value!r}")
    bucket = as_integer("pad_to_length_bucket", pad_to_length_bucket)  # R-ENGINE-1, R-ERR-3
    if bucket < 1:
        raise ValueError(f"pad_to_length_bucket must be >= 1, got pad_to_length_bucket={bucket}")
    if dynamic_context_parallel and not use_remove_padding:  # R-ENGINE-2
        raise ValueError("dynamic_context_parallel requires use_remove_padding=True")
    if dynamic_context_parallel and pad_to_length:  # R-ENGINE-3
        raise NotImplementedError("pad_to_length is not supported with dynamic_context_parallel")
    if pad_to_length and not use_remove_padding:  # R-ENGINE-4 (erratum E-6)
        raise ValueError(
            "pad_to_length=True requires use_remove_padding=True; upstream silently ignores the "
            "bucket there"
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
