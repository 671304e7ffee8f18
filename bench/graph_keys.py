"""Graph keys: everything about a pack that a compiled consumer specializes on.

``torch.compile(dynamic=False)`` guards on every tensor shape and every Python int it is
handed; TE's cuDNN graph cache keys on the same values. A varlen attention call is handed the
rows (``local_rows``), ``cu_seqlens`` and ``cu_seqlens_padded`` (length K + 1), ``max_seqlen``
and, through the rows and CP, the total. Two micro-batches with the same key reuse one graph;
the number of distinct keys is the number of compiles, which a bucket alone does not bound.
"""

from __future__ import annotations

from typing import Any

GraphKey = tuple[tuple[str, int], ...]


def graph_key(plan: Any) -> GraphKey:
    """The key of one plan (impl's or the reference's: only lengths and ints are read)."""
    return (
        ("rows", int(plan.local_rows)),
        ("cu_seqlens", len(plan.cu_seqlens)),
        ("cu_seqlens_padded", len(plan.cu_seqlens_padded)),
        ("max_seqlen", int(plan.max_seqlen)),
        ("total", int(plan.total)),
    )
