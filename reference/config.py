"""The static packing configuration (R-IN-3), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from . import alignment, segments
from .validation import (
    as_choice,
    as_fp8,
    as_layout,
    as_max_num_seqs,
    as_optional_size,
    as_size,
)


@dataclass(frozen=True)
class PackConfig:
    """R-IN-3. Field checks run in the order of the fields (R-ERR-1..4, R-ERR-12).

    The defaults of the four 1.1 fields (tail, seq_align, max_num_seqs, max_seqlen) and
    fp8=False give every 1.0 pack unchanged.
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

    def __post_init__(self) -> None:
        # Normalise integer-like values (e.g. numpy ints) to int, so that equality and hashing
        # behave; frozen dataclasses need object.__setattr__ for that.
        object.__setattr__(self, "tp_size", as_size("tp_size", self.tp_size))
        object.__setattr__(self, "cp_size", as_size("cp_size", self.cp_size))
        object.__setattr__(self, "cp_layout", as_layout(self.cp_layout))
        object.__setattr__(self, "fp8", as_fp8(self.fp8, alignment.FP8_RECIPES))
        object.__setattr__(self, "bucket", as_optional_size("bucket", self.bucket))
        object.__setattr__(
            self, "min_local_rows", as_optional_size("min_local_rows", self.min_local_rows)
        )
        object.__setattr__(self, "tail", as_choice("tail", self.tail, segments.TAILS))
        object.__setattr__(
            self, "seq_align", as_choice("seq_align", self.seq_align, alignment.SEQ_ALIGNS)
        )
        object.__setattr__(self, "max_num_seqs", as_max_num_seqs(self.max_num_seqs))
        object.__setattr__(
            self, "max_seqlen", as_choice("max_seqlen", self.max_seqlen, segments.MAX_SEQLENS)
        )

    @property
    def base_align(self) -> int:
        """R-ALIGN-1: A0."""
        return alignment.base_alignment(self.tp_size, self.cp_size, self.cp_layout)

    @property
    def sequence_base(self) -> int:
        """R-ALIGN-5: As."""
        return alignment.sequence_base(
            self.tp_size, self.cp_size, self.cp_layout, self.seq_align
        )

    @property
    def sequence_align(self) -> int:
        """R-ALIGN-2: A."""
        return alignment.sequence_alignment(self.sequence_base, self.fp8)

    @property
    def fp8_quantum(self) -> int | None:
        """R-FP8-1: q (16 for fp8=True), None without FP8."""
        return alignment.fp8_quantum(self.fp8)

    @property
    def fp8_total_align(self) -> int | None:
        """R-TOTAL-1: F, None without FP8."""
        return alignment.fp8_total_alignment(
            self.base_align, self.tp_size, self.cp_size, self.fp8
        )

    @property
    def total_modulus(self) -> int:
        """R-TOTAL-2: M."""
        return alignment.total_modulus(
            self.sequence_align, self.tp_size * self.cp_size, self.bucket, self.fp8_total_align
        )
