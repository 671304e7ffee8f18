"""The static packing configuration (R-IN-3), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from . import alignment
from .validation import as_bool, as_layout, as_optional_size, as_size


@dataclass(frozen=True)
class PackConfig:
    """R-IN-3. Field checks run in the order of the fields (R-ERR-1..4)."""

    tp_size: int = 1
    cp_size: int = 1
    cp_layout: str = "zigzag"
    fp8: bool = False
    bucket: int | None = None
    min_local_rows: int | None = None

    def __post_init__(self) -> None:
        # Normalise integer-like values (e.g. numpy ints) to int, so that equality and hashing
        # behave; frozen dataclasses need object.__setattr__ for that.
        object.__setattr__(self, "tp_size", as_size("tp_size", self.tp_size))
        object.__setattr__(self, "cp_size", as_size("cp_size", self.cp_size))
        object.__setattr__(self, "cp_layout", as_layout(self.cp_layout))
        object.__setattr__(self, "fp8", as_bool("fp8", self.fp8))
        object.__setattr__(self, "bucket", as_optional_size("bucket", self.bucket))
        object.__setattr__(
            self, "min_local_rows", as_optional_size("min_local_rows", self.min_local_rows)
        )

    @property
    def base_align(self) -> int:
        """R-ALIGN-1."""
        return alignment.base_alignment(self.tp_size, self.cp_size, self.cp_layout)

    @property
    def sequence_align(self) -> int:
        """R-ALIGN-2."""
        return alignment.sequence_alignment(self.base_align, self.fp8)

    @property
    def fp8_total_align(self) -> int | None:
        """R-TOTAL-1."""
        return alignment.fp8_total_alignment(self.base_align) if self.fp8 else None

    @property
    def total_modulus(self) -> int:
        """R-TOTAL-2."""
        return alignment.total_modulus(self.sequence_align, self.bucket, self.fp8_total_align)
