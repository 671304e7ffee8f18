"""The spec's alignment and total requirements as plain formulas, per convention.

Written from the spec's text, not from `reference/`, so that the oracle-free tests judge the
reference too. Configs are the suite's keyword dicts, valid ones; absent fields are defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# R-FP8-1: rows per GEMM each FP8 recipe needs (TE's get_align_size_for_quantization: 16 for
# every built-in recipe but MXFP8 32 and NVFP4 128, Float8BlockScaling included); fp8=True is
# verl's boolean, whose GEMM need is tensor scaling's 16.
FP8_QUANTUM = {"tensor": 16, "mxfp8": 32, "block": 16, "nvfp4": 128}


def _sizes(config: Mapping[str, Any]) -> tuple[int, int, int]:
    """tp, cp and the zigzag factor f (2 for zigzag with cp > 1)."""
    tp, cp = int(config.get("tp_size", 1)), int(config.get("cp_size", 1))
    f = 2 if config.get("cp_layout", "zigzag") == "zigzag" and cp > 1 else 1
    return tp, cp, f


def base_align(config: Mapping[str, Any]) -> int:
    """R-ALIGN-1: A0 = tp * cp * f."""
    tp, cp, f = _sizes(config)
    return tp * cp * f


def sequence_base(config: Mapping[str, Any]) -> int:
    """R-ALIGN-5: As = A0 under seq_align='tp_cp', cp * f under 'cp'; R-ALIGN-6: 1 under
    'none'."""
    _, cp, f = _sizes(config)
    seq_align = config.get("seq_align", "tp_cp")
    if seq_align == "none":
        return 1
    return base_align(config) if seq_align == "tp_cp" else cp * f


def fp8_quantum(config: Mapping[str, Any]) -> int | None:
    """R-FP8-1 / R-CONSUMER-5: q of the config's FP8 setting (None without FP8)."""
    fp8 = config.get("fp8", False)
    if fp8 is True:
        return 16
    if isinstance(fp8, str):
        return FP8_QUANTUM[fp8]
    return None


def sequence_align(config: Mapping[str, Any]) -> int:
    """R-ALIGN-2: A = lcm(16, As) with fp8=True; As otherwise (a recipe asks nothing of one
    sequence)."""
    a_s = sequence_base(config)
    return math.lcm(16, a_s) if config.get("fp8", False) is True else a_s


def fp8_total(config: Mapping[str, Any]) -> int | None:
    """R-TOTAL-1: F = 128 * A0 with fp8=True, tp * cp * q for a recipe, None without FP8."""
    fp8 = config.get("fp8", False)
    if fp8 is True:
        return 128 * base_align(config)
    if isinstance(fp8, str):
        tp, cp, _ = _sizes(config)
        return tp * cp * FP8_QUANTUM[fp8]
    return None


def total_divisors(config: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Every number a valid total must be a multiple of, with the rule that asks for it: A (the
    last sequence, or the padding segment, stays aligned: R-TOTAL-5 / R-TAIL-1), tp * cp
    (sequence parallelism on every rank's rows, R-TOTAL-2), the bucket (R-TOTAL-2), F (R-TOTAL-1,
    R-FP8-1)."""
    tp, cp, _ = _sizes(config)
    tail_rule = {"segment": "R-TAIL-1", "tokens": "R-TAIL-3"}.get(config.get("tail", "last"),
                                                                   "R-TOTAL-5")
    out = [(tail_rule, sequence_align(config)), ("R-TOTAL-2", tp * cp)]
    if config.get("bucket") is not None:
        out.append(("R-TOTAL-2", int(config["bucket"])))
    f8 = fp8_total(config)
    if f8 is not None:
        out.append(("R-TOTAL-1", f8))
    return out


def total_modulus(config: Mapping[str, Any]) -> int:
    """M of R-TOTAL-2: the lcm of `total_divisors`."""
    return math.lcm(*(d for _, d in total_divisors(config)))


def ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def padded_sum(lengths: Sequence[int], config: Mapping[str, Any]) -> int:
    """S: every sequence padded to A (R-ALIGN-3, R-ALIGN-5), the total padding not counted."""
    a = sequence_align(config)
    return sum(ceil_to(int(n), a) for n in lengths)


def lower_bound(lengths: Sequence[int], config: Mapping[str, Any]) -> int:
    """N of R-TOTAL-3: max(S, cp * min_local_rows)."""
    s = padded_sum(lengths, config)
    mlr = config.get("min_local_rows")
    return max(s, int(config.get("cp_size", 1)) * int(mlr)) if mlr is not None else s
