# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 1.0.2
"""`PackConfig`: the static packing configuration and its validation (R-IN-3, R-ERR-1..4).

Pure Python: no tensor is created here, so a config can be built and checked anywhere.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

INT32_MAX = 2**31 - 1
LAYOUTS = ("zigzag", "contiguous")


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


def ceil_to(x: int, a: int) -> int:
    """Smallest multiple of `a` that is `>= x` (spec §0)."""
    return -(-x // a) * a


@dataclass(frozen=True)
class PackConfig:
    """Static configuration of a pack (R-IN-3), validated when constructed (R-ERR-1..4).

    Integer fields are normalised to Python ints, so a config built from NumPy or tensor scalars
    compares and hashes like one built from ints.
    """

    tp_size: int = 1
    cp_size: int = 1
    cp_layout: str = "zigzag"
    fp8: bool = False
    bucket: int | None = None
    min_local_rows: int | None = None

    def __post_init__(self) -> None:
        # R-ERR-1 (and the TypeError half of R-ERR-3): every type first.
        tp = as_integer("tp_size", self.tp_size)
        cp = as_integer("cp_size", self.cp_size)
        if not isinstance(self.cp_layout, str):
            raise TypeError(f"cp_layout must be a str, got cp_layout={self.cp_layout!r}")
        if not isinstance(self.fp8, bool):
            raise TypeError(f"fp8 must be a bool, got fp8={self.fp8!r}")
        bucket = None if self.bucket is None else as_integer("bucket", self.bucket)
        mlr = (
            None
            if self.min_local_rows is None
            else as_integer("min_local_rows", self.min_local_rows)
        )
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
        if self.cp_layout not in LAYOUTS:
            raise ValueError(
                f"cp_layout must be 'zigzag' or 'contiguous', got cp_layout={self.cp_layout!r}"
            )
        object.__setattr__(self, "tp_size", tp)
        object.__setattr__(self, "cp_size", cp)
        object.__setattr__(self, "bucket", bucket)
        object.__setattr__(self, "min_local_rows", mlr)

    @property
    def base_align(self) -> int:
        """`A0 = tp * cp * f`, f = 2 for zigzag with cp > 1 (R-ALIGN-1)."""
        f = 2 if self.cp_layout == "zigzag" and self.cp_size > 1 else 1
        return self.tp_size * self.cp_size * f

    @property
    def sequence_align(self) -> int:
        """Per-sequence alignment `A` (R-ALIGN-2)."""
        a0 = self.base_align
        return math.lcm(16, a0) if self.fp8 else a0

    @property
    def fp8_total_align(self) -> int | None:
        """`F = 128 * A0` with FP8, else None (R-TOTAL-1)."""
        return 128 * self.base_align if self.fp8 else None

    @property
    def total_modulus(self) -> int:
        """`M = lcm(A, bucket, F)` over the terms that are set (R-TOTAL-2)."""
        m = self.sequence_align
        if self.bucket is not None:
            m = math.lcm(m, self.bucket)
        f = self.fp8_total_align
        if f is not None:
            m = math.lcm(m, f)
        return m
