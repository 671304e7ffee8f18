"""What the binner adapters share: refusing config fields without a counterpart, and token
values that name their example and offset (read back to see which pieces went where).

A config field left out is not checked: the peer then runs its own behaviour for it, which its
target's `declared_bins` states (the suite asks for what was declared). A field given with a
value the peer has no counterpart for is refused with `NotDeclared` naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from thd_packing.conformance.protocol import NotDeclared

# A token value names its example and its offset in it: example << 32 | offset (R-BIN-1 keeps
# both below 2**31, so every value is a non-negative int64).
SHIFT = 32
MASK = (1 << SHIFT) - 1


def refuse(config: Mapping[str, Any], peer: str,
           supported: Mapping[str, Iterable[Any]]) -> None:
    """NotDeclared naming the first given field whose value `peer` cannot take:
    `supported` maps a field to the values the peer has a counterpart for (a field missing
    from `supported` has none at all, except `capacity`, which every binner takes)."""
    for field, value in config.items():
        if field == "capacity":
            continue
        allowed = list(supported.get(field, ()))
        if value not in allowed:
            raise NotDeclared(
                f"{peer} has no counterpart for config {field}={value!r} "
                f"(it takes {field} in {allowed})" if allowed else
                f"{peer} has no counterpart for config {field}")


def token_ids(lengths: Iterable[int]) -> list[list[int]]:
    """Each example's ids: token t of example i is i << 32 | t."""
    return [[(i << SHIFT) | t for t in range(int(n))] for i, n in enumerate(lengths)]


def pieces_of(row: Iterable[int], cuts: Iterable[int] | None = None) -> list[tuple[int, int, int]]:
    """The pieces `(example, start, length)` one packed row holds, read off its token values: a
    piece ends where the next token is not the next offset of the same example, and at every
    boundary in `cuts` (the segment lengths a peer reports beside the row, where it does)."""
    ids = np.asarray(list(row), dtype=np.int64)
    if ids.size == 0:
        return []
    breaks = set(np.flatnonzero(np.diff(ids) != 1) + 1)
    if cuts is not None:
        breaks |= set(np.cumsum(list(cuts))[:-1].tolist())
    out = []
    start = 0
    for end in sorted(int(b) for b in breaks if 0 < b < ids.size) + [int(ids.size)]:
        first = int(ids[start])
        out.append((first >> SHIFT, first & MASK, int(end - start)))
        start = end
    return out
