"""The consumer contract's buffer (spec §12a): the padded buffer as a target describes it.

Reads every rank's `cu_seqlens_padded` and row count from the target's own outputs (never the
reference's plan) and checks what TransformerEngine, Megatron's sequence parallelism and FP8
GEMMs need of it (R-CONSUMER-1 to -5), and its real boundaries where given (R-CONSUMER-8, -9).
`check_buffer` returns every rank's consumer slots, which the row checks of `contract.py` read.
Each check raises `RuleViolation` naming the rule it disproves, or `TargetError` when the output
cannot be read at all.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from thd_packing import reference

from .requirements import fp8_quantum
from .under_test import RuleViolation, TargetError

INT32_MAX = 2**31 - 1


class RankOutput(NamedTuple):
    """One rank's output as the target returned it (any object with these fields will do)."""

    rows: Any
    pos: Any
    meta: Any


@dataclass(frozen=True)
class Layout:
    """What the consumers are configured with: the config's tp, cp, layout and FP8 recipe only
    (never its convention fields: tail, seq_align and the static metadata are the packer's
    choices, which the contract does not assume)."""

    tp: int
    cp: int
    layout: str
    fp8_quantum: int | None  # R-FP8-1: rows per FP8 GEMM (16 for fp8=True), None without FP8

    @property
    def fp8(self) -> bool:
        return self.fp8_quantum is not None

    @property
    def zigzag(self) -> bool:
        return self.layout == "zigzag" and self.cp > 1

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Layout:
        return cls(int(config.get("tp_size", 1)), int(config.get("cp_size", 1)),
                   str(config.get("cp_layout", "zigzag")), fp8_quantum(config))


@dataclass(frozen=True)
class Buffer:
    """The padded buffer as the target describes it, read and checked (R-CONSUMER-1..3)."""

    bounds: np.ndarray  # C, int64, K + 1 entries
    local_rows: int  # n, the same on every rank
    slots: list[tuple[np.ndarray, np.ndarray]]  # per rank: segment and offset of every row

    @property
    def segments(self) -> np.ndarray:
        return np.diff(self.bounds)


def violation(message: str, rule: str) -> RuleViolation:
    return RuleViolation(message, {rule})


# ----------------------------------------------------------------------------------------------
# Reading the output (TargetError where it cannot be read)


def meta_of(output: Any, rank: int) -> Mapping[str, Any]:
    meta = getattr(output, "meta", None)
    if not isinstance(meta, Mapping):
        raise TargetError(f"rank {rank}: meta is {type(meta).__name__}, not a mapping")
    return meta


def _padded_bounds(output: Any, rank: int) -> np.ndarray:
    meta = meta_of(output, rank)
    if "cu_seqlens_padded" not in meta:
        raise TargetError(f"rank {rank}: meta has no cu_seqlens_padded (keys {sorted(meta)})")
    try:
        bounds = np.asarray(meta["cu_seqlens_padded"])
    except Exception as exc:  # an object NumPy cannot read is the target's fault
        raise TargetError(f"rank {rank}: cu_seqlens_padded cannot be read: {exc}") from exc
    if bounds.ndim != 1 or bounds.size == 0:
        raise TargetError(f"rank {rank}: cu_seqlens_padded has shape {bounds.shape}, not [K + 1]")
    if bounds.dtype.kind not in "iu":
        raise violation(f"rank {rank}: cu_seqlens_padded has dtype {bounds.dtype}, not an "
                         "integer type", "R-CONSUMER-1")
    return bounds.astype(np.int64)


def rank_rows(outputs: Sequence[Any]) -> int:
    """R-CONSUMER-3: the common row count of the ranks (TargetError if rows are not arrays)."""
    counts = []
    for rank, output in enumerate(outputs):
        rows = getattr(output, "rows", None)
        if not isinstance(rows, np.ndarray) or rows.ndim == 0:
            raise TargetError(f"rank {rank}: rows is {type(rows).__name__}"
                              f"{list(getattr(rows, 'shape', []))}, not an array [n, *trail]")
        counts.append(int(rows.shape[0]))
    if len(set(counts)) > 1:
        # TE's CP attention exchanges equal blocks between ranks: unequal counts are a
        # contract verdict, not an unreadable output.
        raise violation(f"ranks hold different row counts {counts[:8]}", "R-CONSUMER-3")
    return counts[0]


def _optional_int(meta: Mapping[str, Any], key: str, rank: int, rule: str) -> int | None:
    if key not in meta:
        return None
    try:
        return operator.index(meta[key])
    except TypeError:
        raise violation(f"rank {rank}: {key} is {meta[key]!r}, not an integer", rule) from None


# ----------------------------------------------------------------------------------------------
# The buffer: R-CONSUMER-1 to R-CONSUMER-5


def padded_bounds(outputs: Sequence[Any]) -> np.ndarray:
    """R-CONSUMER-1: the target's cu_seqlens_padded, one on every rank, well-formed; int64."""
    if not outputs:
        raise TargetError("no rank output")
    bounds = _padded_bounds(outputs[0], 0)
    for rank in range(1, len(outputs)):
        other = _padded_bounds(outputs[rank], rank)
        if not np.array_equal(other, bounds):
            raise violation(f"cu_seqlens_padded differs between ranks: rank 0 "
                             f"{bounds.tolist()[:8]}, rank {rank} {other.tolist()[:8]}",
                             "R-CONSUMER-1")
    if bounds[0] != 0:
        raise violation(f"cu_seqlens_padded starts at {int(bounds[0])}, not 0", "R-CONSUMER-1")
    down = np.flatnonzero(np.diff(bounds) < 0)
    if down.size:
        k = int(down[0])
        raise violation(f"cu_seqlens_padded decreases at entry {k + 1}: {int(bounds[k])} -> "
                         f"{int(bounds[k + 1])}", "R-CONSUMER-1")
    total = int(bounds[-1])
    if total > INT32_MAX:
        raise violation(f"cu_seqlens_padded[-1] = {total} exceeds int32", "R-CONSUMER-1")
    for rank, output in enumerate(outputs):
        given = _optional_int(meta_of(output, rank), "total", rank, "R-CONSUMER-1")
        if given is not None and given != total:
            raise violation(f"rank {rank}: total {given}, but cu_seqlens_padded ends at "
                             f"{total}", "R-CONSUMER-1")
    return bounds


def check_buffer(outputs: Sequence[Any], config: Mapping[str, Any]) -> Buffer:
    """R-CONSUMER-1, -2, -3: the target's padded buffer is one TE can partition; returns it
    with every rank's consumer slots (R-CONSUMER-6)."""
    lay = Layout.of(config)
    if len(outputs) != lay.cp:
        raise TargetError(f"{len(outputs)} rank outputs for cp_size {lay.cp}")
    bounds = padded_bounds(outputs)
    total = int(bounds[-1])
    n = rank_rows(outputs)
    if n * lay.cp != total:
        raise violation(f"every rank holds {n} rows: {n} * cp_size {lay.cp} = {n * lay.cp}, "
                         f"but cu_seqlens_padded ends at {total}", "R-CONSUMER-3")
    for rank, output in enumerate(outputs):
        given = _optional_int(meta_of(output, rank), "local_rows", rank, "R-CONSUMER-3")
        if given is not None and given != n:
            raise violation(f"rank {rank}: local_rows {given}, but it holds {n} rows",
                             "R-CONSUMER-3")

    segments = np.diff(bounds)
    if lay.zigzag:
        bad = np.flatnonzero(segments % (2 * lay.cp))
        if bad.size:
            k = int(bad[0])
            raise violation(f"segment {k} of cu_seqlens_padded has {int(segments[k])} rows, "
                             f"not divisible by 2 * cp_size = {2 * lay.cp} (zigzag): TE's "
                             f"partition cannot split it ({bad.size} such segments)",
                             "R-CONSUMER-2")
    slots = []
    for rank in range(lay.cp):
        rows = np.asarray(reference.partitioned_indices(bounds.tolist(), total, lay.cp, rank,
                                                        lay.layout), dtype=np.int64)
        seg = np.searchsorted(bounds, rows, side="right") - 1
        slots.append((seg, rows - bounds[seg]))
    return Buffer(bounds, n, slots)


def check_tp_split(outputs: Sequence[Any], config: Mapping[str, Any]) -> None:
    """R-CONSUMER-4: sequence parallelism splits each rank's n rows by tp."""
    lay = Layout.of(config)
    n = rank_rows(outputs)
    if n % lay.tp:
        raise violation(f"each rank holds {n} rows, not divisible by tp_size {lay.tp} "
                         "(Megatron sequence parallelism splits them)", "R-CONSUMER-4")


def check_fp8_split(outputs: Sequence[Any], config: Mapping[str, Any]) -> None:
    """R-CONSUMER-5: with FP8, every TP slice of a rank holds a multiple of the recipe's q rows
    (R-FP8-1: 16 for fp8=True, 'tensor' and 'block', 32 'mxfp8', 128 'nvfp4'), i.e. n / tp
    an integer divisible by q."""
    lay = Layout.of(config)
    n = rank_rows(outputs)
    q = lay.fp8_quantum
    if q is not None and n % (q * lay.tp):
        recipe = config.get("fp8")
        raise violation(f"fp8={recipe!r}: each TP slice holds {n} / {lay.tp} = "
                         f"{n / lay.tp:g} rows, not a multiple of {q} (FP8 GEMM)",
                         "R-CONSUMER-5")


# The integer outputs besides cu_seqlens_padded (R-CONSUMER-1 reads its dtype).
INTEGER_META = ("seqlens", "seqlens_padded", "cu_seqlens")


def check_integer_dtypes(outputs: Sequence[Any]) -> None:
    """R-CONSUMER-16: position ids and the metadata arrays, where given, in an integer dtype, as
    the packer produced them (TE's offsets, PackedSeqParams, a model's RoPE index with them)."""
    for rank, output in enumerate(outputs):
        meta = meta_of(output, rank)
        held = [(key, meta[key]) for key in INTEGER_META if key in meta]
        pos = getattr(output, "pos", None)
        if pos is not None:
            held.append(("position ids", pos))
        for key, value in held:
            dtype = np.asarray(value).dtype
            if dtype.kind not in "iu":
                raise violation(f"rank {rank}: {key} have dtype {dtype}, not an integer type",
                                "R-CONSUMER-16")


# ----------------------------------------------------------------------------------------------
# Real boundaries: R-CONSUMER-8, R-CONSUMER-9


def check_real_cu_seqlens(lengths: Sequence[int], outputs: Sequence[Any],
                          bounds: np.ndarray) -> None:
    """R-CONSUMER-8: real cu_seqlens (where given) has the lengths L_i and stays within the
    padded segments."""
    segments = np.diff(bounds)
    for rank, output in enumerate(outputs):
        meta = meta_of(output, rank)
        if "cu_seqlens" not in meta:
            continue
        real = np.asarray(meta["cu_seqlens"])
        if real.ndim != 1 or real.shape != bounds.shape or real.dtype.kind not in "iu":
            raise violation(f"rank {rank}: cu_seqlens {real.dtype}{list(real.shape)}, "
                             f"cu_seqlens_padded has {bounds.size} entries", "R-CONSUMER-8")
        real = real.astype(np.int64)
        if real[0] != 0:
            raise violation(f"rank {rank}: cu_seqlens starts at {int(real[0])}",
                             "R-CONSUMER-8")
        diff = np.diff(real)
        for k in range(diff.size):
            want = lengths[k] if k < len(lengths) else None
            if (want is not None and diff[k] != want) or not 0 <= diff[k] <= segments[k]:
                expected = f"L_{k} = {want}" if want is not None else "0 .. its padded length"
                raise violation(f"rank {rank}: cu_seqlens segment {k} has length "
                                 f"{int(diff[k])}, expected {expected} (padded segment "
                                 f"{int(segments[k])})", "R-CONSUMER-8")


def check_max_seqlen(outputs: Sequence[Any], bounds: np.ndarray) -> None:
    """R-CONSUMER-9: max_seqlen (where given) covers every padded segment."""
    segments = np.diff(bounds)
    longest = int(segments.max()) if segments.size else 0
    for rank, output in enumerate(outputs):
        given = _optional_int(meta_of(output, rank), "max_seqlen", rank, "R-CONSUMER-9")
        if given is not None and given < longest:
            raise violation(f"rank {rank}: max_seqlen {given} < the longest padded segment "
                             f"{longest}", "R-CONSUMER-9")
