# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""`PackConfig`: the static packing configuration and its validation (R-IN-3, R-ERR-1..4, -12).

Pure Python: no tensor is created here, so a config can be built and checked anywhere.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

INT32_MAX = 2**31 - 1
LAYOUTS = ("zigzag", "contiguous")
TAILS = ("last", "segment", "tokens")
SEQ_ALIGNS = ("tp_cp", "cp", "none")
LABELS = ("roll", "ignore")
MAX_SEQLENS = ("exact", "total")
# R-FP8-1: rows per GEMM each FP8 recipe needs (TE's get_align_size_for_quantization: 16 for
# every built-in recipe but MXFP8 32 and NVFP4 128, Float8BlockScaling included).
FP8_QUANTUM = {"tensor": 16, "mxfp8": 32, "block": 16, "nvfp4": 128}


def _is_bool_like(value: Any) -> bool:
    """True for Python and NumPy bools and for 0-d bool tensors, which spec §0 excludes."""
    if isinstance(value, bool):
        return True
    if type(value).__name__ in ("bool_", "bool") and type(value).__module__ == "numpy":
        return True
    dtype = getattr(value, "dtype", None)
    return dtype is not None and str(dtype) in ("torch.bool", "bool")


def as_integer(name: str, value: Any) -> int:
    """Return `value` as an int if it is an *integer* in the sense of spec §0, else TypeError."""
    if _is_bool_like(value):
        raise TypeError(f"{name} must be an integer, not a bool: {name}={value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an integer, got {type(value).__name__}: {name}={value!r}"
        ) from None


def _check_str(name: str, value: Any) -> None:
    """R-ERR-1 for a str-valued field."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}: {name}={value!r}")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """R-ERR-4, R-ERR-12: one of the field's named values."""
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {allowed}, got {name}={value!r}")


def ceil_to(x: int, a: int) -> int:
    """Smallest multiple of `a` that is `>= x` (spec §0)."""
    return -(-x // a) * a


@dataclass(frozen=True)
class PackConfig:
    """Static configuration of a pack (R-IN-3), validated when constructed (R-ERR-1..4, -12).

    Integer fields are normalised to Python ints, so a config built from NumPy or tensor scalars
    compares and hashes like one built from ints.
    """

    tp_size: int = 1
    cp_size: int = 1
    cp_layout: str = "zigzag"
    fp8: bool | str = False
    bucket: int | None = None
    min_local_rows: int | None = None
    tail: str = "last"
    seq_align: str = "tp_cp"
    max_num_seqs: int | None = None
    max_seqlen: str = "exact"
    fixed_total: int | None = None
    labels: str = "roll"
    ignore_index: int = -100

    def __post_init__(self) -> None:
        # R-ERR-1 (and the TypeError half of R-ERR-3): every type first, in field order.
        tp = as_integer("tp_size", self.tp_size)
        cp = as_integer("cp_size", self.cp_size)
        _check_str("cp_layout", self.cp_layout)
        if not isinstance(self.fp8, (bool, str)):
            raise TypeError(f"fp8 must be a bool or a recipe name (str), got fp8={self.fp8!r}")
        bucket = None if self.bucket is None else as_integer("bucket", self.bucket)
        mlr = (
            None
            if self.min_local_rows is None
            else as_integer("min_local_rows", self.min_local_rows)
        )
        _check_str("tail", self.tail)
        _check_str("seq_align", self.seq_align)
        mns = None if self.max_num_seqs is None else as_integer("max_num_seqs", self.max_num_seqs)
        _check_str("max_seqlen", self.max_seqlen)
        fixed = None if self.fixed_total is None else as_integer("fixed_total", self.fixed_total)
        _check_str("labels", self.labels)
        ignore = as_integer("ignore_index", self.ignore_index)  # R-LABEL-2
        # R-ERR-2: sizes.
        if tp < 1:
            raise ValueError(f"tp_size must be >= 1, got tp_size={tp}")
        if cp < 1:
            raise ValueError(f"cp_size must be >= 1, got cp_size={cp}")
        if mlr is not None and mlr < 1:
            raise ValueError(f"min_local_rows must be >= 1, got min_local_rows={mlr}")
        # R-ERR-3: bucket value.
        if bucket is not None and bucket < 1:
            raise ValueError(f"bucket must be >= 1, got bucket={bucket}")
        # R-ERR-4: layout value.
        _check_choice("cp_layout", self.cp_layout, LAYOUTS)
        # R-ERR-12: the convention fields' values.
        if isinstance(self.fp8, str):
            _check_choice("fp8", self.fp8, tuple(FP8_QUANTUM))
        _check_choice("tail", self.tail, TAILS)
        _check_choice("seq_align", self.seq_align, SEQ_ALIGNS)
        if mns is not None and mns < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got max_num_seqs={mns}")
        if mns is not None and mns > INT32_MAX:  # before any array of mns entries exists
            raise ValueError(f"max_num_seqs must be <= INT32_MAX={INT32_MAX}, "
                             f"got max_num_seqs={mns}")
        _check_choice("max_seqlen", self.max_seqlen, MAX_SEQLENS)
        if fixed is not None and not 1 <= fixed <= INT32_MAX:  # R-ERR-14
            raise ValueError(f"fixed_total must be in [1, INT32_MAX={INT32_MAX}], "
                             f"got fixed_total={fixed}")
        _check_choice("labels", self.labels, LABELS)
        object.__setattr__(self, "tp_size", tp)
        object.__setattr__(self, "cp_size", cp)
        object.__setattr__(self, "bucket", bucket)
        object.__setattr__(self, "min_local_rows", mlr)
        object.__setattr__(self, "max_num_seqs", mns)
        object.__setattr__(self, "fixed_total", fixed)
        object.__setattr__(self, "ignore_index", ignore)
        self._check_combinations()

    def _check_combinations(self) -> None:
        """R-ERR-14: 1.2 values that other fields rule out, with both fields named."""
        zigzag_cp = self.cp_layout == "zigzag" and self.cp_size > 1
        for name, value, bad in (("seq_align", self.seq_align, "none"),
                                 ("tail", self.tail, "tokens")):
            if value == bad and zigzag_cp:  # R-ALIGN-6, R-TAIL-3: TE's 2 * cp chunks
                raise ValueError(
                    f"{name}={bad!r} needs cp_layout='contiguous' or cp_size=1, got "
                    f"cp_layout={self.cp_layout!r} with cp_size={self.cp_size}"
                )
        if self.tail == "tokens" and self.max_num_seqs is not None:  # R-TAIL-3
            raise ValueError(f"tail='tokens' cannot take max_num_seqs={self.max_num_seqs}: "
                             "its segment count grows with the padding rows")
        if self.fixed_total is not None:  # R-TOTAL-7
            if self.bucket is not None:
                raise ValueError(f"fixed_total={self.fixed_total} and bucket={self.bucket} "
                                 "are exclusive")
            m = self.total_modulus
            if self.fixed_total % m:
                raise ValueError(f"fixed_total={self.fixed_total} is not a multiple of the "
                                 f"total modulus M={m}")

    @property
    def base_align(self) -> int:
        """`A0 = tp * cp * f`, f = 2 for zigzag with cp > 1 (R-ALIGN-1)."""
        f = 2 if self.cp_layout == "zigzag" and self.cp_size > 1 else 1
        return self.tp_size * self.cp_size * f

    @property
    def sequence_base(self) -> int:
        """`As`: A0 under seq_align="tp_cp", `cp * f` under "cp" (R-ALIGN-5), 1 under "none"
        (R-ALIGN-6)."""
        if self.seq_align == "none":
            return 1
        if self.seq_align == "cp":
            return self.base_align // self.tp_size
        return self.base_align

    @property
    def sequence_align(self) -> int:
        """Per-sequence alignment `A` (R-ALIGN-2): `lcm(16, As)` for fp8=True only; a recipe
        adds nothing per sequence (its GEMMs see a rank's whole buffer)."""
        base = self.sequence_base
        return math.lcm(16, base) if self.fp8 is True else base

    @property
    def fp8_quantum(self) -> int | None:
        """`q`: 16 for fp8=True, the recipe's rows per GEMM (R-FP8-1), None without FP8."""
        if self.fp8 is True:
            return 16
        return FP8_QUANTUM[self.fp8] if isinstance(self.fp8, str) else None

    @property
    def fp8_total_align(self) -> int | None:
        """`F`: `128 * A0` for fp8=True, `tp * cp * q` for a recipe, else None (R-TOTAL-1)."""
        if self.fp8 is True:
            return 128 * self.base_align
        q = self.fp8_quantum
        return None if q is None else self.tp_size * self.cp_size * q

    @property
    def total_modulus(self) -> int:
        """`M = lcm(A, tp * cp, bucket, F)` over the terms that are set (R-TOTAL-2)."""
        m = math.lcm(self.sequence_align, self.tp_size * self.cp_size)
        if self.bucket is not None:
            m = math.lcm(m, self.bucket)
        f = self.fp8_total_align
        if f is not None:
            m = math.lcm(m, f)
        return m
