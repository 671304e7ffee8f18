"""The static packing configuration (R-IN-3), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from . import alignment, labels, segments
from .validation import (
    as_choice,
    as_fixed_total,
    as_fp8,
    as_integer,
    as_layout,
    as_max_num_seqs,
    as_optional_size,
    as_size,
)


@dataclass(frozen=True)
class PackConfig:
    """R-IN-3. Field checks run in the order of the fields (R-ERR-1..4, R-ERR-12, R-ERR-14),
    then the checks across fields (R-ERR-14).

    The defaults of the four 1.1 fields (tail, seq_align, max_num_seqs, max_seqlen) and
    fp8=False give every 1.0 pack unchanged; the defaults of the three 1.2 fields (fixed_total,
    labels, ignore_index) every 1.1 pack.
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
        object.__setattr__(self, "fixed_total", as_fixed_total(self.fixed_total))
        object.__setattr__(self, "labels", as_choice("labels", self.labels, labels.LABELS))
        # R-LABEL-2: an integer; whether the batch's dtype holds it is checked per call (R-ERR-16).
        object.__setattr__(self, "ignore_index", as_integer("ignore_index", self.ignore_index))
        self._check_combinations()

    def _check_combinations(self) -> None:
        """R-ERR-14: the 1.2 values that other fields rule out, named with both fields."""
        zigzag_cp = self.cp_layout == "zigzag" and self.cp_size > 1
        if self.seq_align == "none" and zigzag_cp:
            # R-ALIGN-6: TE cuts every segment into 2 * cp chunks, so zigzag needs A >= 2 * cp.
            raise ValueError(
                f"seq_align='none' needs cp_layout='contiguous' or cp_size=1, got "
                f"cp_layout={self.cp_layout!r} with cp_size={self.cp_size}"
            )
        if self.tail == "tokens" and zigzag_cp:
            # R-TAIL-3: a one-row segment cannot be cut into 2 * cp chunks.
            raise ValueError(
                f"tail='tokens' needs cp_layout='contiguous' or cp_size=1, got "
                f"cp_layout={self.cp_layout!r} with cp_size={self.cp_size}"
            )
        if self.tail == "tokens" and self.max_num_seqs is not None:
            # R-TAIL-3: the segment count grows with the padding; no fixed count can hold it.
            raise ValueError(
                f"tail='tokens' cannot take max_num_seqs={self.max_num_seqs}: its segment count "
                "grows with the padding rows"
            )
        if self.fixed_total is not None and self.bucket is not None:
            # R-TOTAL-7: a fixed total and a bucket are exclusive.
            raise ValueError(
                f"fixed_total={self.fixed_total} and bucket={self.bucket} are exclusive"
            )
        if self.fixed_total is not None and self.fixed_total % self.total_modulus != 0:
            # R-TOTAL-7: N must be a total the alignment allows.
            raise ValueError(
                f"fixed_total={self.fixed_total} is not a multiple of the total modulus "
                f"M={self.total_modulus}"
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
