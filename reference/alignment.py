"""Alignment arithmetic: per-sequence alignment and the total length (spec §2 and §3)."""

from __future__ import annotations

import math


def ceil_to(x: int, a: int) -> int:
    """The smallest multiple of `a` that is >= `x` (notation, §0)."""
    return ((x + a - 1) // a) * a


def base_alignment(tp_size: int, cp_size: int, cp_layout: str) -> int:
    """R-ALIGN-1: A0 = tp * cp * f, with f = 2 only for zigzag with more than one rank."""
    if cp_layout == "zigzag" and cp_size > 1:
        f = 2
    else:
        f = 1
    return tp_size * cp_size * f


def sequence_alignment(base: int, fp8: bool) -> int:
    """R-ALIGN-2: A = lcm(16, A0) with FP8, else A0."""
    if fp8:
        return math.lcm(16, base)
    return base


def fp8_total_alignment(base: int) -> int:
    """R-TOTAL-1: F = 128 * A0."""
    return 128 * base


def total_modulus(seq_align: int, bucket: int | None, fp8_total: int | None) -> int:
    """R-TOTAL-2: M = lcm(A, bucket if set, F if fp8)."""
    modulus = seq_align
    if bucket is not None:
        modulus = math.lcm(modulus, bucket)
    if fp8_total is not None:
        modulus = math.lcm(modulus, fp8_total)
    return modulus


def padded_lengths(seqlens: list[int], seq_align: int) -> list[int]:
    """R-ALIGN-3: P_i = ceil_to(L_i, A); a zero-length sequence (R-IN-2) stays zero."""
    padded = []
    for length in seqlens:
        padded.append(ceil_to(length, seq_align))
    return padded


def total_length(
    padded: list[int], cp_size: int, min_local_rows: int | None, modulus: int
) -> int:
    """R-TOTAL-3, R-TOTAL-4: T = ceil_to(max(S, cp * min_local_rows), M)."""
    lower_bound = sum(padded)
    if min_local_rows is not None:
        lower_bound = max(lower_bound, cp_size * min_local_rows)
    return ceil_to(lower_bound, modulus)
