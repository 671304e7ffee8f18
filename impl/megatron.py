# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 1.0.2
"""Drop-in replacements for verl 0.9.1's `preprocess_thd_engine` / `postprocess_thd_engine`.

Same signatures and return values as verl's (`verl/models/mcore/util.py`), with the packing
arithmetic of this spec (differences: spec/errata.md). megatron-core is imported lazily, inside
the functions, so `import impl` never needs it (R-MEG-1..3).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .config import LAYOUTS, PackConfig
from .pack import check_batch, check_pad_value, pack_batch
from .plan import host_lengths, plan_with_host
from .unpack import check_shards, unpack_flat


def _megatron() -> tuple[Any, Any]:
    """Import megatron-core's parallel state and `PackedSeqParams` on first use."""
    from megatron.core import parallel_state
    from megatron.core.packed_seq_params import PackedSeqParams

    return parallel_state, PackedSeqParams


def packed_seq_params_fields(cls: Any) -> set[str]:
    """Constructor arguments of the installed `PackedSeqParams` (they change across versions;
    for a dataclass, its init fields)."""
    return set(inspect.signature(cls).parameters)


def _cp_info(mpu: Any, local_cp_size: int | None, group: Any = None) -> tuple[int, int, Any]:
    """(cp size, cp rank, cp group) from Megatron's parallel state or the dynamic-CP group."""
    if local_cp_size is None:
        return (
            mpu.get_context_parallel_world_size(),
            mpu.get_context_parallel_rank(),
            None,
        )
    if group is None:
        get_groups = getattr(mpu, "get_dynamic_data_context_parallel_groups", None)
        if get_groups is None:
            raise ValueError(
                f"local_cp_size={local_cp_size!r} (dynamic context parallel) needs "
                "megatron.core.parallel_state.get_dynamic_data_context_parallel_groups, which "
                "the installed megatron-core does not provide"
            )
        group = get_groups(group_size=local_cp_size)
    return local_cp_size, torch.distributed.get_rank(group=group), group


def preprocess_thd_engine(
    input_ids: torch.Tensor,
    pre_process: bool = True,
    need_roll: bool = False,
    use_fp8_padding: bool = False,
    local_cp_size: int | None = None,
    min_local_rows: int | None = None,
    pad_to_length_bucket: int | None = None,
    cp_layout: str = "zigzag",
) -> tuple[torch.Tensor, Any, torch.Tensor | None]:
    """Pack a jagged nested tensor for this CP rank (R-MEG-1, R-MEG-2).

    Returns `(rows [1, R, *trail], PackedSeqParams, position_ids [1, R])`; with
    `pre_process=False`, `(input_ids, PackedSeqParams, None)` as in verl. The cu_seqlens live on
    the input's device (int32). Reading the nested tensor's offsets costs one device-to-host
    copy when it lives on an accelerator (verl makes three).
    """
    mpu, packed_seq_params_cls = _megatron()
    if cp_layout not in LAYOUTS:
        raise ValueError(f"cp_layout must be 'zigzag' or 'contiguous', got {cp_layout!r}")
    tp = mpu.get_tensor_model_parallel_world_size()
    cp, rank, group = _cp_info(mpu, local_cp_size)
    config = PackConfig(
        tp_size=tp,
        cp_size=cp,
        cp_layout=cp_layout,
        fp8=use_fp8_padding,
        bucket=pad_to_length_bucket,
        min_local_rows=min_local_rows,
    )
    fields = packed_seq_params_fields(packed_seq_params_cls)
    if cp_layout != "zigzag" and cp > 1 and "cp_partition_mode" not in fields:  # R-MEG-2
        raise ValueError(
            f"cp_layout={cp_layout!r} with cp_size={cp} needs PackedSeqParams.cp_partition_mode, "
            "which the installed megatron-core does not provide; use cp_layout='zigzag' or a "
            "megatron-core that has it"
        )
    if not isinstance(input_ids, torch.Tensor) or not input_ids.is_nested:
        raise TypeError(f"input_ids must be a jagged nested tensor, got {type(input_ids).__name__}")
    batch = check_batch(input_ids)
    fill = check_pad_value(0, batch.dtype)  # verl pads with zeros
    plan, padded, cu_padded = plan_with_host(batch.lengths, config)
    cu = plan.cu_seqlens_padded.to(device=batch.device, non_blocking=True)
    candidates: dict[str, Any] = {
        "qkv_format": "thd",
        "cu_seqlens_q": cu,
        "cu_seqlens_kv": cu,
        "cu_seqlens_q_padded": cu,
        "cu_seqlens_kv_padded": cu,
        "max_seqlen_q": plan.max_seqlen,
        "max_seqlen_kv": plan.max_seqlen,
        "cp_partition_mode": cp_layout,
    }
    if local_cp_size is not None:
        candidates["local_cp_size"] = local_cp_size
        candidates["cp_group"] = group
    params = packed_seq_params_cls(**{k: v for k, v in candidates.items() if k in fields})
    if not pre_process:
        return input_ids, params, None
    rows, pos = pack_batch(batch, plan, config, rank, need_roll, fill, (padded, cu_padded))
    return rows.unsqueeze(0), params, pos.unsqueeze(0)


def postprocess_thd_engine(
    output: torch.Tensor,
    packed_seq_params: Any,
    input_ids: torch.Tensor,
    batch_size: int,
    post_process: bool = True,
    local_cp_size: int | None = None,
    cp_layout: str = "zigzag",
) -> torch.Tensor:
    """All-gather the CP ranks' `[1, R, *trail]` outputs and unpack them (R-MEG-3).

    Returns a jagged nested tensor whose component `i` holds sequence `i`'s real rows; it is a
    view of one gathered buffer, and the local rank's `output` stays in the autograd graph.
    """
    if cp_layout not in LAYOUTS:
        raise ValueError(f"cp_layout must be 'zigzag' or 'contiguous', got {cp_layout!r}")
    if not post_process:
        return output
    mpu, _ = _megatron()
    if local_cp_size is None:
        cp, rank, _ = _cp_info(mpu, None)
        group = mpu.get_context_parallel_group() if cp > 1 else None
    else:
        group = packed_seq_params.cp_group
        cp, rank, group = _cp_info(mpu, local_cp_size, group)
    batch = check_batch(input_ids)
    if batch.lengths.numel() != batch_size:
        raise ValueError(f"batch_size={batch_size} but input_ids holds {batch.lengths.numel()}")
    cu_padded = getattr(packed_seq_params, "cu_seqlens_q_padded", None)
    if cu_padded is None:
        cu_padded = packed_seq_params.cu_seqlens_q
    cu_padded_host = host_lengths(cu_padded, "cu_seqlens_q_padded")  # one copy if on a device
    total = int(cu_padded_host[-1])
    if total % cp != 0:
        raise ValueError(f"padded total {total} is not divisible by cp_size={cp}")
    if output.dim() < 2 or output.shape[0] != 1:
        raise ValueError(f"output must be [1, R, *trail], got shape {tuple(output.shape)}")
    if cp > 1:
        gathered = [torch.empty_like(output) for _ in range(cp)]
        torch.distributed.all_gather(gathered, output.detach(), group=group)
        gathered[rank] = output  # keep the local part in the autograd graph
    else:
        gathered = [output]
    shards = check_shards([g[0] for g in gathered], total // cp, cp)
    flat = unpack_flat(shards, batch.lengths, cu_padded_host, cp, cp_layout)
    offsets = torch.zeros(batch_size + 1, dtype=torch.int64)
    torch.cumsum(batch.lengths, 0, out=offsets[1:])
    return torch.nested.nested_tensor_from_jagged(
        flat,
        offsets=offsets.to(device=flat.device, non_blocking=True),
        min_seqlen=int(batch.lengths.min()),
        max_seqlen=int(batch.lengths.max()),
    )
