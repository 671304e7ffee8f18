"""The plan's segments: where the total-level rows go and the static entries (§3, §4a).

The B sequences become K >= B segments: under tail="segment" a padding-only segment follows
them, under tail="tokens" a one-row padding segment per padding row, and with max_num_seqs
zero-length entries fill the arrays up to a fixed count.
"""

from __future__ import annotations

TAILS = ("last", "segment", "tokens")
MAX_SEQLENS = ("exact", "total")


def check_num_seqs(num_seqs: int, tail: str, max_num_seqs: int | None) -> None:
    """R-ERR-13: the B sequences, and under tail="segment" the padding segment's entry
    (reserved whether or not it has rows, so the error never depends on the lengths), must fit
    in max_num_seqs entries."""
    if max_num_seqs is None:
        return
    if tail == "last" and num_seqs > max_num_seqs:
        raise ValueError(
            f"max_num_seqs={max_num_seqs} is too small for B={num_seqs} sequences "
            f"(tail={tail!r} needs max_num_seqs >= B)"
        )
    if tail == "segment" and num_seqs >= max_num_seqs:
        raise ValueError(
            f"max_num_seqs={max_num_seqs} is too small for B={num_seqs} sequences plus the "
            f"padding segment (tail={tail!r} needs max_num_seqs >= B + 1)"
        )


def place_tail(
    seqlens: list[int], padded: list[int], total: int, tail: str, max_num_seqs: int | None
) -> tuple[list[int], list[int]]:
    """Where the T - S rows of the total-level stages go: (L_k, P_k) of the segments.

    S and M are multiples of A, so T - S is too: the segment carrying it stays aligned, and
    under zigzag it splits into 2 * cp chunks.
    """
    lengths = list(seqlens)
    segments = list(padded)
    extra = total - sum(padded)
    if tail == "last":
        segments[-1] += extra  # R-TOTAL-5: onto the last real sequence, B - 1
    elif tail == "segment":
        # R-TAIL-1: its own padding-only segment at index B (L = 0, P = T - S). Without
        # max_num_seqs only when it has rows; with it always (R-STATIC-1: entry B is reserved).
        if extra > 0 or max_num_seqs is not None:
            lengths.append(0)
            segments.append(extra)
    elif tail == "tokens":
        # R-TAIL-3: every one of the T - S rows is a one-row padding segment of its own, at
        # indices B .. B + T - S - 1 (L = 0, P = 1). max_num_seqs is refused with it (R-ERR-14).
        for _ in range(extra):
            lengths.append(0)
            segments.append(1)
    else:
        raise ValueError(f"tail must be one of {TAILS}, got {tail!r}")
    return lengths, segments


def static_entries(
    lengths: list[int], segments: list[int], max_num_seqs: int | None
) -> tuple[list[int], list[int]]:
    """R-STATIC-1: with max_num_seqs = N, zero-length entries (L = P = 0) at the end of the
    buffer fill the arrays to N segments, whatever B is."""
    lengths = list(lengths)
    segments = list(segments)
    if max_num_seqs is None:
        return lengths, segments
    while len(segments) < max_num_seqs:
        lengths.append(0)
        segments.append(0)
    return lengths, segments


def plan_max_seqlen(segments: list[int], total: int, policy: str) -> int:
    """The plan's max_seqlen under the max_seqlen policy."""
    if policy == "exact":
        return max(segments)  # R-META-4: max(P_k) over every segment
    if policy == "total":
        return total  # R-STATIC-2: T bounds every segment and is fixed by the bucket
    raise ValueError(f"max_seqlen must be one of {MAX_SEQLENS}, got {policy!r}")
