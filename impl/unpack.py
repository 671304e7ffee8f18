# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""`unpack_thd`: one gather over all ranks' rows through the inverse row map (spec §9).

The ranks' rows are concatenated in rank order (skipped when cp = 1), then one `index_select`
pulls every real token into a flat `[sum L, *trail]` buffer, which is split into per-sequence
views. The number of torch ops does not depend on B; the host builds an O(B * 2cp) segment
table. Gradients flow to every shard through `cat` and `index_select`.
"""

from __future__ import annotations

from typing import Any

import torch

from .config import PackConfig
from .pack import bits_view
from .plan import Plan
from .rowmap import expand, index_dtype, unpack_segments


def check_shards(shards: Any, local_rows: int, cp: int) -> list[torch.Tensor]:
    """R-ERR-1, R-ERR-11: shard count, row counts, trailing shapes, dtypes, devices."""
    if not isinstance(shards, (list, tuple)):
        raise TypeError(f"shards must be a list or tuple of tensors, got {type(shards).__name__}")
    for k, x in enumerate(shards):
        if not isinstance(x, torch.Tensor) or x.is_nested:
            raise TypeError(f"shards[{k}] must be a torch.Tensor, got {type(x).__name__}")
    if len(shards) != cp:
        raise ValueError(f"expected cp_size={cp} shards, got {len(shards)}")
    for k, x in enumerate(shards):
        if x.dim() == 0 or x.shape[0] != local_rows:
            raise ValueError(f"shards[{k}] has shape {tuple(x.shape)}, expected {local_rows} rows")
    first = shards[0]
    for k, x in enumerate(shards):
        if x.shape[1:] != first.shape[1:]:
            raise ValueError(
                f"shards[{k}] has trailing shape {tuple(x.shape[1:])}, "
                f"shards[0] has {tuple(first.shape[1:])}"
            )
        if x.dtype != first.dtype:
            raise ValueError(f"shards[{k}] has dtype {x.dtype}, shards[0] has {first.dtype}")
        if x.device != first.device:
            raise ValueError(f"shards[{k}] is on {x.device}, shards[0] is on {first.device}")
    return list(shards)


def check_plan(plan: Plan, cp: int, layout: str) -> None:
    """Host checks that the plan is self-consistent, so the inverse map stays in range.

    R-ERR-11 names the total; a plan whose arrays disagree with each other (hand-built or
    tampered) is rejected the same way instead of gathering out of range.
    """
    if plan.total != plan.local_rows * cp:
        raise ValueError(
            f"plan total={plan.total} is not local_rows={plan.local_rows} * cp_size={cp}"
        )
    lengths = plan.seqlens.to(torch.int64)
    padded = plan.seqlens_padded.to(torch.int64)
    cup = plan.cu_seqlens_padded.to(torch.int64)
    k = lengths.numel()
    if k == 0 or padded.shape != (k,) or cup.shape != (k + 1,):
        raise ValueError("plan arrays have inconsistent lengths")
    b = plan.num_seqs
    if type(b) is not int or not 1 <= b <= k:
        raise ValueError(f"plan num_seqs={b!r} is not in [1, {k}] (len(seqlens)={k})")
    ok = (
        int(cup[0]) == 0
        and int(cup[-1]) == plan.total
        and bool(torch.equal(cup[1:] - cup[:-1], padded))
        and bool(((lengths >= 0) & (lengths <= padded)).all())
        and (b == k or not bool(lengths[b:].any()))  # past B no real row (R-TAIL-1)
    )
    if ok and cp > 1 and layout == "zigzag":
        ok = bool((padded % (2 * cp) == 0).all())
    if not ok:
        raise ValueError("plan is inconsistent: seqlens, seqlens_padded, cu_seqlens_padded, total")


def unpack_flat(
    shards: list[torch.Tensor],
    seqlens: torch.Tensor,
    cu_padded: torch.Tensor,
    cp: int,
    layout: str,
) -> torch.Tensor:
    """Gather every real token into a flat `[sum L, *trail]` tensor (R-UNPACK-1, R-UNPACK-3).

    `seqlens` and `cu_padded` are host (CPU) integer tensors; shards are already checked.
    """
    lengths = seqlens.to(torch.int64)
    cup = cu_padded.to(torch.int64)
    cu = torch.zeros_like(cup)
    torch.cumsum(lengths, 0, out=cu[1:])
    n = int(cu[-1])
    local_rows = shards[0].shape[0]
    starts, d = unpack_segments(lengths, cup[1:] - cup[:-1], cu, cup, cp, layout, local_rows)
    first = shards[0]
    # No early return for n == 0: an empty gather from the shards keeps the result in the
    # autograd graph (R-MEG-3), so a backward through an all-empty batch gives zero gradients.
    bits = bits_view(first.dtype)
    if bits is not None:  # kernels missing for this dtype: move the bits instead
        shards = [s.view(bits) for s in shards]
    src = shards[0] if cp == 1 else torch.cat(shards, dim=0)
    idx = expand(n, starts, d, slope=1, dtype=index_dtype(cp * local_rows, n), device=first.device)
    out = src.index_select(0, idx)
    return out if bits is None else out.view(first.dtype)


def unpack_thd(shards: Any, plan: Plan, config: PackConfig) -> list[torch.Tensor]:
    """Rebuild the batch from every rank's rows, in rank order (R-UNPACK-1..3, R-ERR-11).

    Returns B = `plan.num_seqs` tensors `[L_i, *trail]`: views into one flat buffer. Segments
    past B (a padding segment, zero-length entries) hold no real row and are skipped.
    """
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
    parts = check_shards(shards, plan.local_rows, config.cp_size)
    check_plan(plan, config.cp_size, config.cp_layout)
    seqlens, cu_padded = plan.seqlens, plan.cu_seqlens_padded
    b = plan.num_seqs
    if b < seqlens.numel():  # only the B real sequences are gathered and returned
        seqlens, cu_padded = seqlens[:b], cu_padded[: b + 1]
    flat = unpack_flat(parts, seqlens, cu_padded, config.cp_size, config.cp_layout)
    return list(torch.split(flat, seqlens.tolist(), dim=0))
