"""Segments read from position ids alone, as position-id consumers do (spec §12b).

transformers' padding-free path (`DataCollatorWithFlattening`,
`masking_utils.find_packed_sequence_indices`), TRL, torchtitan and verl's FSDP attention start a
new segment wherever a position id does not follow its predecessor by one. On the reference's
packs the derived segments holding real rows are the non-empty sequences (R-PID-2), and the
padding derives per tail as R-PID-3 says.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def segments_from_position_ids(position_ids: Any) -> np.ndarray:
    """R-PID-1: the derived `cu_seqlens` (int64) of a buffer's position ids in buffer order.

    A segment starts at row 0 and at every row k with `p[k] != p[k - 1] + 1`; the last entry is
    the row count. An empty buffer has no segment: `[0]`.
    """
    ids = np.asarray(position_ids)
    if ids.ndim != 1:
        raise ValueError(f"position_ids must be 1-D, got shape {ids.shape}")
    if ids.size and ids.dtype.kind not in ("i", "u"):
        raise TypeError(f"position_ids must hold integers, got dtype {ids.dtype}")
    starts = []
    for k in range(len(ids)):
        if k == 0 or int(ids[k]) != int(ids[k - 1]) + 1:
            starts.append(k)  # R-PID-1: a new segment
    return np.array([*starts, len(ids)], dtype=np.int64)
