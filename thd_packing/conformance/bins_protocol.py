"""The binner protocol: how the suite talks to a bin step under test (spec/bins.md).

A binner target is any object with a `name`, a `declared_bins` (`BinDeclared`: what the suite
cannot see by looking) and a `bin(lengths, config) -> Binned` method. `lengths` is a 1-D int64
NumPy array; `config` is `BinConfig` as keyword arguments (`capacity`, `algorithm`, `cost`,
`pack` as `PackConfig` keyword arguments under `cost="rows"`, `overflow`, `order`, `min_bins`,
`bins_multiple_of`; a field left out is the spec's default). The adapter maps them onto its
binner's own parameters, calls it, and hands back what it returned as it returned it; a field
it has no counterpart for it refuses by raising `protocol.NotDeclared` naming the field, which
the suite never asks for unless the target declared it (asked within what it declares, that is
a usage error of the adapter; a plain `NotImplementedError` from the binner is a crash). A
target may be a packer and a binner at once: the suite runs the tiers of each method it finds.
A balancer that splits items into a given number of parts (data-parallel ranks) has
`partition(weights, k, equal_size) -> parts`, the parts as lists of item indices (R-BIN-19).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Binned:
    """A binner's output, as produced: `bins` a list of bins, each a list of items, an item an
    example index (the whole example) or `(example, start, length)` (a piece of it, R-BIN-4);
    `fates` one of "whole", "split", "truncated", "dropped" per example where the binner
    reports them, else None (the suite reads them off the bins)."""

    bins: Any
    fates: Any = None


@dataclass(frozen=True)
class BinDeclared:
    """What the suite cannot find out by looking. `algorithms`: the spec algorithms the binner
    claims to be, chosen by `config["algorithm"]` (R-BIN-10..15), each judged bin for bin
    against the reference; empty claims none and is judged on the contract alone. `overflow`:
    the policies it can be asked for (B3).
    `costs`: "tokens" (the field's budget) and/or "rows" (R-BIN-5). `order`: the order its bins
    list their pieces in ("input", "placement") or None for no claim (R-BIN-16). `features`:
    "min_bins", "bins_multiple_of" (R-BIN-17), "zero_length" (examples of length 0, R-BIN-1).
    `validated_elsewhere`: "lengths", "capacity" where callers validate them (R-BIN-1, R-BIN-2).
    `max_items`: draws longer lists are declined (a binner with per-call overhead)."""

    algorithms: frozenset[str] = frozenset()
    overflow: frozenset[str] = frozenset({"reject"})
    costs: frozenset[str] = frozenset({"tokens"})
    order: str | None = None
    features: frozenset[str] = frozenset()
    lacks: frozenset[str] = frozenset()
    validated_elsewhere: frozenset[str] = frozenset()
    max_items: int | None = None
    notes: dict[str, Any] = field(default_factory=dict)


BIN_FEATURES = {
    "min_bins": "config min_bins=N: at least N bins (R-BIN-17)",
    "bins_multiple_of": "config bins_multiple_of=D: a multiple of D bins (R-BIN-17)",
    "equal_size": "partition(..., equal_size=True): parts of equal item counts (R-BIN-19)",
}
BIN_BASE = {"zero_length": "examples of length 0 (R-BIN-1)"}
