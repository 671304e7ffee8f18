"""The bin step's contract (spec/bins.md): checks over a binner's own output, any algorithm.

Pure functions over plain data: the lengths handed to the binner, the bins it returned (each a
list of items: an example index, meaning the whole example, or `(example, start, length)`, a
piece of it), the fates it reports where it reports them, and the configuration as keyword
arguments of `BinConfig`. They need no reference bins: what a trainer needs of any binner is
that every token is accounted for, no bin exceeds the capacity, nothing is cut or lost unless
the configuration says so, and the same input gives the same bins. Each check raises
`RuleViolation` naming the rule, with the first offending example or bin, or `TargetError`
when the output cannot be read. `check_bins` runs them in the order a failure is best
explained.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from thd_packing.reference import bins as rb

from .buffer import violation
from .under_test import TargetError

Piece = tuple[int, int, int]
# An overflowing example's fate under each policy, and the rule that says so (B3); "reject"
# raises, so no fate is right under it.
POLICY_FATE = {"reject": "", "truncate": "truncated", "split": "split", "drop": "dropped"}
POLICY_RULE = {"reject": "R-BIN-6", "truncate": "R-BIN-7", "split": "R-BIN-8", "drop": "R-BIN-9"}


def read_bins(bins: Any, lengths: Sequence[int]) -> list[list[Piece]]:
    """The bins as pieces; an int item is the whole example. TargetError for anything else: not
    a list of lists, an item that is neither an integer nor three integers, an example index
    out of range."""
    if isinstance(bins, (str, bytes)) or not isinstance(bins, Sequence):
        raise TargetError(f"bins must be a list of lists, got {type(bins).__name__}")
    out: list[list[Piece]] = []
    for number, b in enumerate(bins):
        if isinstance(b, (str, bytes)) or not isinstance(b, Sequence):
            raise TargetError(f"bin {number} must be a list, got {type(b).__name__}")
        pieces = []
        for item in b:
            try:
                if isinstance(item, Sequence) and len(item) == 3:
                    example, start, length = (operator.index(x) for x in item)
                else:
                    example = operator.index(item)
                    start, length = 0, -1
            except TypeError:
                raise TargetError(f"bin {number} holds {item!r}: neither an example index nor "
                                  "(example, start, length)") from None
            if not 0 <= example < len(lengths):
                raise TargetError(f"bin {number} names example {example}, of {len(lengths)}")
            if length == -1:
                length = lengths[example]
            pieces.append((example, start, length))
        out.append(pieces)
    return out


def _fates(lengths: Sequence[int], bins: list[list[Piece]]) -> list[str]:
    """Each example's fate as its pieces show it (R-BIN-18); "lost" where they show none of
    the spec's: a gap, an overlap, or tokens past its end."""
    pieces: list[list[tuple[int, int]]] = [[] for _ in lengths]
    for b in bins:
        for example, start, length in b:
            pieces[example].append((start, length))
    fates = []
    for length, mine in zip(lengths, pieces, strict=True):
        mine.sort()
        end = 0
        tiles = True
        for start, size in mine:
            tiles = tiles and start == end and size >= 0
            end = start + size
        if not mine:
            fates.append("dropped")
        elif not tiles or end > length:
            fates.append("lost")
        elif end < length:
            fates.append("truncated" if len(mine) == 1 else "lost")
        else:
            fates.append("whole" if len(mine) == 1 else "split")
    return fates


def check_accounting(lengths: Sequence[int], bins: list[list[Piece]], config: Mapping[str, Any],
                     fates: Sequence[str] | None = None) -> None:
    """R-BIN-18 with R-BIN-6, R-BIN-7, R-BIN-8, R-BIN-9 and R-BIN-14: every token once; an
    example that fits alone is kept whole (cut only by `wrapped`); one that does not is split,
    truncated or dropped only as the overflow policy says (a failure is charged to the rule of
    the declared policy); where the binner reports fates, they are what its bins show."""
    shown = _fates(lengths, bins)
    for i, fate in enumerate(shown):
        if fate == "lost":
            raise violation(f"example {i} ({lengths[i]} tokens) is not accounted for exactly "
                            f"once: its pieces {sorted(p for b in bins for p in b if p[0] == i)}"
                            " leave a gap, overlap or pass its end", "R-BIN-18")
    policy = config.get("overflow", "reject")
    cuts = config.get("algorithm") == "wrapped"
    bconfig = rb.as_config(dict(config))
    for i, fate in enumerate(shown):
        if fate == "whole" or (fate == "split" and cuts):
            continue
        if rb.fits(bconfig, [lengths[i]]):
            raise violation(f"example {i} ({lengths[i]} tokens) fits alone but is {fate}",
                            "R-BIN-18")
        if fate != POLICY_FATE[policy]:
            # The rule of the declared policy: what should have become of the example.
            raise violation(f"example {i} ({lengths[i]} tokens) overflows and is {fate} under "
                            f"overflow={policy!r}", POLICY_RULE[policy])
    if fates is not None and list(fates) != shown:
        i = next(k for k, (a, b) in enumerate(zip(fates, shown, strict=False)) if a != b)
        raise violation(f"example {i}: the binner reports {fates[i]!r}, its bins show "
                        f"{shown[i]!r}", "R-BIN-18")


def check_capacity(lengths: Sequence[int], bins: list[list[Piece]],
                   config: Mapping[str, Any]) -> None:
    """R-BIN-5: every bin fits, its tokens or its plan's total within the capacity."""
    bconfig = rb.as_config(dict(config))
    for number, b in enumerate(bins):
        sizes = [length for _, _, length in b]
        if not rb.fits(bconfig, sizes):
            cost = sum(sizes) if bconfig.cost == "tokens" else _rows(bconfig, sizes)
            raise violation(f"bin {number} ({len(b)} pieces, lengths {sizes}) costs {cost} "
                            f"{bconfig.cost} over capacity={bconfig.capacity}", "R-BIN-5")


def _rows(config: rb.BinConfig, sizes: list[int]) -> str:
    assert config.pack is not None
    try:
        return str(rb.plan_thd(sizes, config.pack).total)
    except ValueError as error:
        return f"no plan ({error})"


def check_count(bins: list[list[Piece]], config: Mapping[str, Any]) -> None:
    """R-BIN-17: no empty bin; at least min_bins; a multiple of bins_multiple_of."""
    for number, b in enumerate(bins):
        if not b:
            raise violation(f"bin {number} is empty: a pack needs a sequence", "R-BIN-17")
    least = config.get("min_bins", 1)
    if bins and len(bins) < least:
        raise violation(f"{len(bins)} bins, fewer than min_bins={least}", "R-BIN-17")
    multiple = config.get("bins_multiple_of", 1)
    if len(bins) % multiple:
        raise violation(f"{len(bins)} bins, not a multiple of bins_multiple_of={multiple}",
                        "R-BIN-17")


def check_order(bins: list[list[Piece]], config: Mapping[str, Any]) -> None:
    """R-BIN-16 under order="input": each bin's pieces in input order."""
    if config.get("order", "input") != "input":
        return
    for number, b in enumerate(bins):
        keys = [(example, start) for example, start, _ in b]
        if keys != sorted(keys):
            raise violation(f"bin {number} lists its pieces {keys} out of input order",
                            "R-BIN-16")


def check_deterministic(first: list[list[Piece]], second: list[list[Piece]]) -> None:
    """R-BIN-18: the same input gives the same bins."""
    if first != second:
        raise violation("the same lengths and config gave different bins on a second call",
                        "R-BIN-18")


def check_bins(lengths: Sequence[int], bins: Any, config: Mapping[str, Any],
               fates: Sequence[str] | None = None, again: Any = None) -> list[list[Piece]]:
    """Every contract check, in the order a failure is best explained; the bins as pieces."""
    pieces = read_bins(bins, lengths)
    check_accounting(lengths, pieces, config, fates)
    check_count(pieces, config)
    check_capacity(lengths, pieces, config)
    check_order(pieces, config)
    if again is not None:
        check_deterministic(pieces, read_bins(again, lengths))
    return pieces
