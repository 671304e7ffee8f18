# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""The padded-batch-plus-mask input form: `pack_thd(x, config, rank, mask=attention_mask)`.

Most RL trainers hold a micro-batch as one padded tensor `x [B, S, *trail]` with a bool
`attention_mask [B, S]` of any pattern (left-padded prompts, right-padded responses, scattered
tokens). Sequence `i` is `x[i, mask[i]]`, in order. The batch is gathered in place, with no
compacted copy and no per-sequence Python loop:

- every row's True entries one run (left or right padding, any mix): the sequences are read
  through per-sequence starts `i * S + first_i` in `x` viewed `[B * S, *trail]` (the jagged
  form with gaps), so the pack is the flat pack's one gather;
- otherwise (scattered): the packer's gather index, built over the concatenated sequences, is
  mapped through the flat positions of the True entries (`nonzero`, one int64 per token) with
  one `index_select`, and the one gather reads `x`.

Cost: the lengths and the first and last True entry of every row come from a few scans over the
mask's bytes viewed as 8-byte words, read on the host in one copy: for a CUDA mask that is the
one device-to-host copy of the pack (5 B integers). `nonzero` is sized by the host total on an
accelerator, so the scattered path does not synchronise again. A non-contiguous `x` is copied
once by `reshape`.
"""

from __future__ import annotations

import sys
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


def mask_runs(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(host lengths, host start of each row's True run, or None when some row's True entries
    are not one run), from one device-to-host copy.

    Left- and right-padded masks are single runs: their batch is then gathered from the padded
    tensor through per-sequence starts, the nested-with-gaps form, with no index of the tokens.
    The first and last True entries are found over 8-byte words (the mask's bytes viewed as
    int64, little-endian hosts, S a multiple of 8), so the scans read B * S / 8 words.
    """
    if mask.device.type == "meta":  # R-DEV-3: the one copy below has nothing to read
        raise ValueError("mask is on device meta, which holds no values")
    b, s = mask.shape
    if s == 0:  # no columns: every sequence is empty (and argmax has nothing to reduce)
        empty = torch.zeros(b, dtype=torch.int64)
        return empty, empty
    u8 = mask.view(torch.uint8)
    # Viewing bytes as int64 needs every stride but the last, and the offset, in whole words;
    # `is_contiguous` alone ignores the stride of a size-1 dim (a transposed [S, 1] mask).
    words_ok = u8.stride(1) == 1 and u8.stride(0) % 8 == 0 and u8.storage_offset() % 8 == 0
    unit = 8 if s % 8 == 0 and words_ok and sys.byteorder == "little" else 1
    words = u8.view(torch.int64) if unit == 8 else u8
    nonzero = (words != 0).view(torch.uint8)
    first_w = nonzero.argmax(1)
    last_w = nonzero.size(1) - 1 - nonzero.flip(1).argmax(1)
    ends = words.gather(1, torch.stack((first_w, last_w), 1)).to(torch.int64)
    if unit == 8:  # a word's byte sum is the top byte of word * 0x0101..01 (bytes are 0 or 1)
        counts = ((words * 0x0101010101010101) >> 56).sum(1)
    else:
        counts = u8.sum(1, dtype=torch.int64)
    host = torch.cat((counts[None], first_w[None], last_w[None],
                      ends.T)).to("cpu")  # the one device-to-host copy
    lengths, fw, lw, fv, lv = host
    if unit == 8:  # byte offsets inside the words: lowest / highest set bit, over 8
        first_byte = torch.frexp((fv & -fv).to(torch.float64))[1] - 1
        last_byte = torch.frexp(lv.to(torch.float64))[1] - 1
        start = fw * 8 + torch.div(first_byte, 8, rounding_mode="floor")
        end = lw * 8 + torch.div(last_byte, 8, rounding_mode="floor") + 1
    else:
        start, end = fw, lw + 1
    real = lengths > 0
    if bool(((end - start != lengths) & real).any()):
        return lengths, None
    return lengths, torch.where(real, start, 0)


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
    host, starts = mask_runs(mask)
    check_lengths(host, mask_name)
    trail = tuple(values.shape[2:])
    flat = values.reshape(b * s, *trail)
    if starts is not None:  # every row one run: per-sequence starts, no token index
        rows = torch.arange(b, dtype=torch.int64) * s
        return Batch(flat, host, rows + starts, None, trail, values.dtype, values.device)
    index = mask_positions(mask, int(host.sum()))
    return Batch(flat, host, None, None, trail, values.dtype, values.device, index=index)
