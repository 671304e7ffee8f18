# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 1.1.0
"""The padded-batch-plus-mask input form: `pack_thd(x, config, rank, mask=attention_mask)`.

Most RL trainers hold a micro-batch as one padded tensor `x [B, S, *trail]` with a bool
`attention_mask [B, S]` of any pattern (left-padded prompts, right-padded responses, scattered
tokens). Sequence `i` is `x[i, mask[i]]`, in order. The batch is gathered in place: the packer's
gather index, built over the sequences' tokens as if they were concatenated, is composed with the
flat positions of the mask's True entries, so no compacted copy of the batch is ever made and the
one gather reads the padded tensor directly. There is no per-sequence Python loop.

Cost: the lengths are one reduction over the mask, read on the host: for a CUDA mask that is one
device-to-host copy (B integers), the only synchronisation of the pack. The flat positions of the
True entries (`nonzero`, sized by the host total on an accelerator so that it does not
synchronise again) are one int64 index of `sum L` entries on the data's device, and the packer's
index is mapped through them with one `index_select`. A non-contiguous `x` is copied once by
`reshape`.
"""

from __future__ import annotations

from typing import Any

import torch

from .pack import Batch
from .plan import check_lengths


def check_mask(mask: Any, shape: tuple[int, ...], device: torch.device, name: str = "mask"
               ) -> None:
    """R-ERR-1 / R-ERR-9 for the mask: a bool tensor `[B, S]` on the batch's device."""
    if not isinstance(mask, torch.Tensor) or mask.is_nested:
        raise TypeError(f"{name} must be a bool torch.Tensor [B, S], got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must have dtype torch.bool, got {name} dtype {mask.dtype} (an "
                        "integer mask would index by position, not select)")
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(mask.shape)}, the batch needs {shape} "
                         "(its first two dimensions)")
    if mask.device != device:
        raise ValueError(f"{name} is on {mask.device}, the batch is on {device}")


def mask_lengths(mask: torch.Tensor) -> torch.Tensor:
    """Sequence lengths as host int64: one reduction, one device-to-host copy for a CUDA mask."""
    counts = mask.view(torch.uint8).sum(1, dtype=torch.int64)
    return counts.to("cpu")


def mask_positions(mask: torch.Tensor, total: int) -> torch.Tensor:
    """Flat positions of the True entries in row-major order (sequence `i`'s tokens in order);
    `total`, known on the host, sizes the result so that an accelerator does not synchronise."""
    flat = mask.reshape(-1)
    if flat.device.type == "cpu":
        return torch.nonzero(flat).view(-1)
    return torch.nonzero_static(flat, size=total).view(-1)


def check_masked(values: Any, mask: Any, lengths: Any = None, mask_name: str = "mask") -> Batch:
    """The batch of the mask form, checked without reading `values` (R-ERR-1, R-ERR-7, R-ERR-9).

    Its values are `values` viewed as `[B * S, *trail]`, and `index` maps the concatenated
    sequences' rows to rows of that view.
    """
    if lengths is not None:
        raise TypeError("lengths= and mask= exclude each other: the mask gives the lengths")
    if not isinstance(values, torch.Tensor) or values.is_nested:
        raise TypeError("with mask=, the batch must be one padded (non-nested) tensor "
                        f"[B, S, *trail], got {type(values).__name__}")
    if values.dim() < 2:
        raise ValueError(f"with mask=, the batch must be [B, S, *trail], got shape "
                         f"{tuple(values.shape)}")
    check_mask(mask, tuple(values.shape[:2]), values.device, mask_name)
    b, s = values.shape[0], values.shape[1]
    if b == 0:
        raise ValueError("empty batch: the mask has no rows (B = 0)")
    host = mask_lengths(mask)
    check_lengths(host, mask_name)
    trail = tuple(values.shape[2:])
    index = mask_positions(mask, int(host.sum()))
    return Batch(values.reshape(b * s, *trail), host, None, None, trail, values.dtype,
                 values.device, index=index)
