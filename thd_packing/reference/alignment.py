"""Alignment arithmetic: per-sequence alignment and the total length (spec §2 and §3).

One function per stage, one branch per convention, each citing its rule.
"""

from __future__ import annotations

import math

SEQ_ALIGNS = ("tp_cp", "cp", "none")
FP8_RECIPES = ("tensor", "mxfp8", "block", "nvfp4")


def ceil_to(x: int, a: int) -> int:
    """The smallest multiple of `a` that is >= `x` (notation, §0)."""
    return ((x + a - 1) // a) * a


def zigzag_factor(cp_size: int, cp_layout: str) -> int:
    """f of §2: zigzag with more than one rank cuts every segment into 2 * cp chunks."""
    if cp_layout == "zigzag" and cp_size > 1:
        return 2
    return 1


def base_alignment(tp_size: int, cp_size: int, cp_layout: str) -> int:
    """R-ALIGN-1: A0 = tp * cp * f, with f = 2 only for zigzag with more than one rank."""
    return tp_size * cp_size * zigzag_factor(cp_size, cp_layout)


def sequence_base(tp_size: int, cp_size: int, cp_layout: str, seq_align: str) -> int:
    """R-ALIGN-5: the sequence base As, the part of A0 every sequence carries."""
    if seq_align == "tp_cp":
        return base_alignment(tp_size, cp_size, cp_layout)  # R-ALIGN-5: As = A0 (verl)
    if seq_align == "cp":
        return cp_size * zigzag_factor(cp_size, cp_layout)  # R-ALIGN-5: As = cp * f
    if seq_align == "none":
        return 1  # R-ALIGN-6: no per-sequence alignment (contiguous or cp = 1 only, R-ERR-14)
    raise ValueError(f"seq_align must be one of {SEQ_ALIGNS}, got {seq_align!r}")


def sequence_alignment(seq_base: int, fp8: bool | str) -> int:
    """R-ALIGN-2: A = lcm(16, As) with fp8=True, else As.

    A recipe name adds nothing per sequence: GEMMs see a rank's whole local buffer, never one
    sequence, so only the total carries the recipe's quantum (R-TOTAL-1).
    """
    if fp8 is True:
        return math.lcm(16, seq_base)  # R-ALIGN-2: verl's use_fp8_padding
    return seq_base  # R-ALIGN-2: fp8=False, or a recipe (R-FP8-1)


def fp8_quantum(fp8: bool | str) -> int | None:
    """R-FP8-1: the rows the recipe needs of what one GEMM sees, TE's
    get_align_size_for_quantization (transformer_engine/pytorch/quantization.py): 32 for MXFP8,
    128 for NVFP4, 16 for every other built-in recipe, block scaling included.

    fp8=True is tensor scaling (R-CONSUMER-5); fp8=False needs nothing.
    """
    if fp8 is False:
        return None
    if fp8 is True or fp8 == "tensor":
        return 16  # R-FP8-1, R-CONSUMER-5: tensor scaling, cuBLASLt FP8 dims % 16
    if fp8 == "mxfp8":
        return 32  # R-FP8-1: MXFP8, one scale per 32 elements
    if fp8 == "block":
        return 16  # R-FP8-1: FP8 block scaling, 16 like every other built-in FP8 recipe
    if fp8 == "nvfp4":
        return 128  # R-FP8-1: NVFP4
    raise ValueError(f"fp8 must be a bool or one of {FP8_RECIPES}, got {fp8!r}")


def fp8_total_alignment(base: int, tp_size: int, cp_size: int, fp8: bool | str) -> int | None:
    """R-TOTAL-1: F = 128 * A0 for fp8=True, tp * cp * q for a recipe; none without FP8."""
    if fp8 is False:
        return None
    if fp8 is True:
        return 128 * base  # R-TOTAL-1: verl's FP8 total alignment
    quantum = fp8_quantum(fp8)
    assert quantum is not None
    # R-TOTAL-1: one TP slice of one rank, T / (cp * tp) rows, divisible by q.
    return tp_size * cp_size * quantum


def total_modulus(
    sequence_align: int, tp_cp: int, bucket: int | None, fp8_total: int | None
) -> int:
    """R-TOTAL-2: M = lcm(A, tp * cp, bucket if set, F if fp8)."""
    modulus = math.lcm(sequence_align, tp_cp)
    if bucket is not None:
        modulus = math.lcm(modulus, bucket)
    if fp8_total is not None:
        modulus = math.lcm(modulus, fp8_total)
    return modulus


def padded_lengths(seqlens: list[int], sequence_align: int) -> list[int]:
    """R-ALIGN-3: P_i = ceil_to(L_i, A); a zero-length sequence (R-IN-2) stays zero."""
    padded = []
    for length in seqlens:
        padded.append(ceil_to(length, sequence_align))
    return padded


def total_length(
    padded: list[int],
    cp_size: int,
    min_local_rows: int | None,
    modulus: int,
    fixed_total: int | None = None,
) -> int:
    """R-TOTAL-3, R-TOTAL-4: T = ceil_to(max(S, cp * min_local_rows), M); with fixed_total = N,
    R-TOTAL-7: T = N, and R-ERR-15 when the aligned total needs more than N."""
    lower_bound = sum(padded)
    if min_local_rows is not None:
        lower_bound = max(lower_bound, cp_size * min_local_rows)
    needed = ceil_to(lower_bound, modulus)
    if fixed_total is None:
        return needed  # R-TOTAL-4
    if needed > fixed_total:
        # R-ERR-15: a fixed total too small is an error, never a truncation.
        raise ValueError(
            f"fixed_total={fixed_total} is too small: this batch needs a total of {needed} rows"
        )
    return fixed_total  # R-TOTAL-7: N is a multiple of M (R-ERR-14), so T = N meets (a)-(d)
