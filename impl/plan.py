# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""The plan: padded lengths, boundaries and totals, computed on the host (spec §2-§4).

Lengths are brought to the host once (a list, a CPU tensor, or one device-to-host copy when they
arrive on an accelerator) and every plan quantity is computed there with a constant number of CPU
tensor ops, so the cost does not grow in torch calls with the batch size and no accelerator is
involved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .config import INT32_MAX, PackConfig, as_integer, ceil_to


@dataclass(frozen=True)
class Plan:
    """Metadata of one pack, identical on every rank (R-META-1..7).

    Arrays are CPU int32 tensors with one entry per segment (K >= B: a padding segment and
    zero-length entries may follow the B sequences, R-TAIL-1, R-STATIC-1); `max_seqlen`,
    `total`, `local_rows` and `num_seqs` (B, R-META-7) are Python ints.
    """

    seqlens: torch.Tensor
    seqlens_padded: torch.Tensor
    cu_seqlens: torch.Tensor
    cu_seqlens_padded: torch.Tensor
    max_seqlen: int
    total: int
    local_rows: int
    num_seqs: int = 0

    def __post_init__(self) -> None:
        # Left out (0, never a valid B: R-ERR-7), num_seqs is len(seqlens), as in the
        # reference: a plan built by a 1.0 caller has K = B.
        if type(self.num_seqs) is int and self.num_seqs == 0:
            object.__setattr__(self, "num_seqs", int(self.seqlens.numel()))

    @property
    def batch_size(self) -> int:
        """B, the number of real sequences (R-META-7; `len(seqlens)` is K)."""
        return self.num_seqs


def host_lengths(seqlens: Any, name: str = "seqlens") -> torch.Tensor:
    """Return the lengths as a 1-D CPU int64 tensor, checking types only (R-ERR-1).

    A list or tuple must hold integers (spec §0, bools refused); a tensor or array must have an
    integer dtype. A tensor on an accelerator is copied to the host here: one device-to-host
    copy, the only synchronisation the whole pack performs.
    """
    if isinstance(seqlens, (list, tuple)):
        if all(type(x) is int for x in seqlens):
            values = list(seqlens)
        else:
            values = [as_integer(f"{name}[{k}]", x) for k, x in enumerate(seqlens)]
        try:
            return torch.tensor(values, dtype=torch.int64)
        except (OverflowError, RuntimeError, ValueError):
            # A Python int beyond int64 is certainly above INT32_MAX (R-ERR-8) or below zero.
            bad = next(v for v in values if not -(2**63) <= v < 2**63)
            raise ValueError(f"length out of range: {name} contains {bad}") from None
    if isinstance(seqlens, torch.Tensor):
        t = seqlens
    elif hasattr(seqlens, "__array__") and not isinstance(seqlens, (str, bytes)):
        t = torch.as_tensor(seqlens)
    else:
        raise TypeError(
            f"{name} must be a list, tuple or 1-D integer tensor, got {type(seqlens).__name__}"
        )
    if t.is_nested or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got dtype {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if t.device.type == "meta":  # R-ERR-9 (1.1.2): lengths must be readable
        raise ValueError(f"{name} is on device meta, which holds no values to read")
    return t.to(device="cpu", dtype=torch.int64)


def check_lengths(lengths: torch.Tensor, name: str = "seqlens") -> None:
    """R-ERR-7, R-ERR-6, R-ERR-8 on host lengths (CPU tensor; scalar reads are host-only)."""
    if lengths.numel() == 0:
        raise ValueError(f"empty batch: {name} has no sequences (B = 0)")
    lo_t, hi_t = torch.aminmax(lengths)
    lo = int(lo_t)
    if lo < 0:
        raise ValueError(f"negative length: {name} contains {lo}")
    hi = int(hi_t)
    if hi > INT32_MAX:
        raise ValueError(f"length above INT32_MAX: {name} contains {hi}")


def check_num_seqs(b: int, config: PackConfig) -> None:
    """R-ERR-13 from B alone: B entries, plus the padding segment's under tail="segment",
    must fit in max_num_seqs (reserved whether or not the segment has rows)."""
    n = config.max_num_seqs
    if n is None:
        return
    need = b + 1 if config.tail == "segment" else b
    if need > n:
        extra = " plus the padding segment's entry" if config.tail == "segment" else ""
        raise ValueError(
            f"max_num_seqs={n} is too small for B={b} sequences{extra} "
            f"(tail={config.tail!r} needs max_num_seqs >= {need})"
        )


def plan_with_host(
    lengths: torch.Tensor, config: PackConfig
) -> tuple[Plan, torch.Tensor, torch.Tensor]:
    """The plan from checked CPU int64 lengths, with its padded lengths and padded offsets also
    as CPU int64, one entry per segment (the row map's inputs) (R-ALIGN-3, R-TOTAL-1..6,
    R-TAIL-1, R-STATIC-1..2, R-META-1..7).

    Each convention is a branch here, on host tensors of B or K entries; the device pipeline
    sees only the resulting segments.
    """
    b = lengths.numel()
    check_num_seqs(b, config)  # R-ERR-13, before the lengths' values are used
    a = config.sequence_align
    if a > INT32_MAX and bool((lengths > 0).any()):  # R-ERR-8, before int64 arithmetic wraps
        raise ValueError(f"total rows T exceed INT32_MAX={INT32_MAX}: a non-empty sequence "
                         f"pads to a multiple of the alignment A={a}")
    padded = lengths  # past INT32_MAX every length is 0 (above), and 0 pads to 0 in any A
    if 1 < a <= INT32_MAX:  # (an A past int64 would overflow the int64 arithmetic here)
        padded = torch.div(lengths + (a - 1), a, rounding_mode="floor").mul_(a)  # R-ALIGN-3
    s = int(padded.sum())
    n = s  # R-TOTAL-3
    if config.min_local_rows is not None:
        n = max(s, config.cp_size * config.min_local_rows)
    total = ceil_to(n, config.total_modulus)  # R-TOTAL-4
    if config.fixed_total is not None:  # R-TOTAL-7, R-ERR-15: exactly N, never truncated
        if total > config.fixed_total:
            raise ValueError(f"fixed_total={config.fixed_total} is too small: this batch needs "
                             f"a total of {total} rows")
        total = config.fixed_total
    if total > INT32_MAX:  # R-TOTAL-6, R-ERR-8
        raise ValueError(f"total rows T={total} exceed INT32_MAX={INT32_MAX}")
    segments = b if config.max_num_seqs is None else config.max_num_seqs  # R-STATIC-1
    if config.tail == "last":
        if total != s:  # R-TOTAL-5: every total-level row goes onto the last sequence
            padded = torch.cat((padded[:-1], padded[-1:] + (total - s)))
    elif config.tail == "tokens":  # R-TAIL-3: T - S one-row segments, L = 0
        if total != s:
            padded = torch.cat((padded, torch.ones(total - s, dtype=torch.int64)))
            segments = b + total - s
    elif total != s:  # R-TAIL-1: segment B, L = 0
        padded = torch.cat((padded, torch.tensor([total - s])))
        segments = max(segments, b + 1)
    # With max_num_seqs and T == S, entry B (the reserved segment, P = 0) is the first of the
    # zero-length entries below: the same data.
    if segments > padded.numel():  # R-STATIC-1: zero-length entries at the end
        padded = F.pad(padded, (0, segments - padded.numel()))
    if segments > b:
        lengths = F.pad(lengths, (0, segments - b))
    cup = F.pad(torch.cumsum(padded, 0), (1, 0))
    cu = F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))  # R-META-2
    # R-META-4 ("exact"), R-STATIC-2 ("total": a static bound)
    max_seqlen = total if config.max_seqlen == "total" else int(padded.max())
    plan = Plan(
        seqlens=lengths.to(torch.int32),  # R-META-1
        seqlens_padded=padded.to(torch.int32),
        cu_seqlens=cu,
        cu_seqlens_padded=cup.to(torch.int32),  # R-META-3
        max_seqlen=max_seqlen,
        total=total,  # R-META-5
        local_rows=total // config.cp_size,
        num_seqs=b,  # R-META-7
    )
    return plan, padded, cup


def plan_thd(seqlens: Any, config: PackConfig) -> Plan:
    """Plan a pack of sequences with lengths `seqlens` under `config` (spec §2-§4).

    `seqlens` is a list/tuple of integers or a 1-D integer tensor (a CUDA tensor costs one
    device-to-host copy). Raises TypeError/ValueError per R-ERR-1, R-ERR-6..8, R-ERR-13.
    """
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    lengths = host_lengths(seqlens)
    check_lengths(lengths)
    return plan_with_host(lengths, config)[0]
