"""The row map: where every local row of a rank comes from (spec §5)."""

from __future__ import annotations

from typing import NamedTuple

from .config import PackConfig
from .plan import Plan
from .validation import as_cp_rank


class RowSource(NamedTuple):
    """Local row source: segment `seq` at offset `offset` of its padded length.

    Segments 0 .. B-1 are the sequences; segments k >= B (the padding segment of R-TAIL-1, the
    zero-length entries of R-STATIC-1) have L_k = 0, so their rows are all padding.
    """

    seq: int
    offset: int
    real: bool  # offset < L_seq


def _source(plan: Plan, seq: int, offset: int) -> RowSource:
    """R-ALIGN-4: the first L_i offsets of a padded sequence are real, the rest padding."""
    return RowSource(seq, offset, offset < int(plan.seqlens[seq]))


def _global_rows(plan: Plan) -> list[RowSource]:
    """R-META-6: the padded buffer, global row by global row, over all K segments."""
    rows = []
    for seq in range(plan.num_segments):
        for offset in range(int(plan.seqlens_padded[seq])):
            rows.append(_source(plan, seq, offset))
    return rows


def _zigzag(plan: Plan, cp_size: int, cp_rank: int) -> list[RowSource]:
    """R-SHARD-2: chunk r, then chunk 2cp-1-r, of every segment in order.

    A zero-length sequence (P_i = 0) has empty chunks and adds no row (R-ROW-3); so does a
    zero-length entry past B (R-STATIC-1). The padding segment (R-TAIL-1) is cut like a sequence.
    """
    rows = []
    for seq in range(plan.num_segments):
        chunk = int(plan.seqlens_padded[seq]) // (2 * cp_size)
        for chunk_index in (cp_rank, 2 * cp_size - 1 - cp_rank):
            for offset in range(chunk_index * chunk, (chunk_index + 1) * chunk):
                rows.append(_source(plan, seq, offset))
    return rows


def row_map(plan: Plan, config: PackConfig, cp_rank: int) -> list[RowSource]:
    """The sources of rank `cp_rank`'s local rows (R-SHARD-1..3).

    Over all ranks the maps are a permutation of the padded buffer (R-SHARD-4): each layout
    splits the global rows into disjoint pieces of `local_rows` rows. Local row k is global row
    `cu_seqlens_padded[seq] + offset`, and those global rows are TE's partition of the plan's
    padded buffer (`partition.partitioned_indices`, R-CONSUMER-6): consumers read the rows where
    the map puts them.
    """
    rank = as_cp_rank(cp_rank, config.cp_size)
    if plan.total != plan.local_rows * config.cp_size:
        raise ValueError(
            f"plan.total {plan.total} != local_rows {plan.local_rows} * cp_size {config.cp_size}"
        )
    if config.cp_size == 1:
        rows = _global_rows(plan)  # R-SHARD-1
    elif config.cp_layout == "zigzag":
        rows = _zigzag(plan, config.cp_size, rank)  # R-SHARD-2
    else:
        everything = _global_rows(plan)  # R-SHARD-3
        rows = everything[rank * plan.local_rows : (rank + 1) * plan.local_rows]
    assert len(rows) == plan.local_rows
    return rows
