"""The bin step: which examples share a pack (spec/bins.md, B1-B6).

Literal on purpose: a bin fits when its plan builds and its total is within the capacity
(R-BIN-5), asked of `plan_thd` itself, and every algorithm is the loop the spec states.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .alignment import ceil_to
from .config import PackConfig
from .plan import plan_thd
from .validation import INT32_MAX, as_choice, as_integer, as_length, as_size

ALGORITHMS = (
    "first_fit",
    "first_fit_decreasing",
    "best_fit_decreasing",
    "sequential",
    "wrapped",
    "karmarkar_karp",
)
COSTS = ("tokens", "rows")
OVERFLOWS = ("reject", "truncate", "split", "drop")
ORDERS = ("input", "placement")
FATES = ("whole", "split", "truncated", "dropped")
_ONE_OPEN_BIN = ("sequential", "wrapped")


class Piece(NamedTuple):
    """R-BIN-4: a run of tokens of one example."""

    example: int
    start: int
    length: int


@dataclass(frozen=True)
class BinConfig:
    """R-BIN-2: checked on construction, in the order of the fields."""

    capacity: int
    algorithm: str = "first_fit_decreasing"
    cost: str = "tokens"
    pack: PackConfig | None = None
    overflow: str = "reject"
    order: str = "input"
    min_bins: int = 1
    bins_multiple_of: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", as_size("capacity", self.capacity))
        object.__setattr__(self, "algorithm", as_choice("algorithm", self.algorithm, ALGORITHMS))
        object.__setattr__(self, "cost", as_choice("cost", self.cost, COSTS))
        if self.cost == "rows" and not isinstance(self.pack, PackConfig):
            raise TypeError(
                f"pack must be a PackConfig under cost='rows', got {type(self.pack).__name__}"
            )
        if self.cost == "tokens" and self.pack is not None:
            raise ValueError(f"pack is read only under cost='rows', got cost='tokens' and "
                             f"pack={self.pack!r}")
        object.__setattr__(self, "overflow", as_choice("overflow", self.overflow, OVERFLOWS))
        if self.algorithm == "wrapped" and self.overflow != "split":
            raise ValueError(f"algorithm='wrapped' cuts examples across bins and takes only "
                             f"overflow='split', got overflow={self.overflow!r}")
        object.__setattr__(self, "order", as_choice("order", self.order, ORDERS))
        object.__setattr__(self, "min_bins", as_size("min_bins", self.min_bins))
        object.__setattr__(
            self, "bins_multiple_of", as_size("bins_multiple_of", self.bins_multiple_of)
        )
        if self.algorithm in _ONE_OPEN_BIN:
            for name in ("min_bins", "bins_multiple_of"):
                if getattr(self, name) != 1:
                    raise ValueError(f"algorithm={self.algorithm!r} keeps one open bin and "
                                     f"takes no {name}, got {name}={getattr(self, name)}")
        if self.cost == "rows" and not fits(self, [1]):
            # R-BIN-3: a one-token example must fit alone.
            raise ValueError(f"capacity={self.capacity} holds no token under cost='rows': "
                             f"one token costs {_one_token_rows(self)} under {self.pack!r}")


def _one_token_rows(config: BinConfig) -> str:
    assert config.pack is not None
    try:
        return f"{plan_thd([1], config.pack).total} rows"
    except ValueError as error:
        return f"a plan error ({error})"


@dataclass(frozen=True)
class Bins:
    """R-BIN-16, R-BIN-18: the bins (lists of pieces) and every example's fate."""

    bins: list[list[Piece]]
    fates: list[str]

    def indices(self) -> list[list[int]]:
        return [[piece.example for piece in b] for b in self.bins]

    def lengths(self) -> list[list[int]]:
        return [[piece.length for piece in b] for b in self.bins]


def size(config: BinConfig, length: int) -> int:
    """R-BIN-4: the length under "tokens", P = ceil_to(L, A) (R-ALIGN-3) under "rows"."""
    if config.cost == "tokens":
        return length
    assert config.pack is not None
    return ceil_to(length, config.pack.sequence_align)


def fits(config: BinConfig, lengths: list[int]) -> bool:
    """R-BIN-5: whether a bin holding pieces of these lengths fits."""
    if config.cost == "tokens":
        return sum(lengths) <= config.capacity
    assert config.pack is not None
    try:
        plan = plan_thd(lengths, config.pack)
    except ValueError:  # R-ERR-8, R-ERR-13, R-ERR-15: no plan, so no pack
        return False
    return plan.total <= config.capacity


def check_lengths(lengths: Any) -> list[int]:
    """R-BIN-1."""
    if hasattr(lengths, "__array__"):  # an array or a host tensor
        array = np.asarray(lengths)
        if array.ndim != 1:
            raise ValueError(f"lengths must be 1-D, got shape {array.shape}")
        if array.dtype.kind not in "iu":
            raise TypeError(f"lengths must hold integers, got dtype {array.dtype}")
        values: list[Any] = list(array)
    elif isinstance(lengths, list | tuple):
        values = list(lengths)
    else:
        raise TypeError(
            f"lengths must be a list, tuple or 1-D integer array, got {type(lengths).__name__}"
        )
    checked = []
    for index, value in enumerate(values):
        try:
            checked.append(as_length(index, value))
        except (TypeError, ValueError) as error:
            raise type(error)(str(error).replace("seqlens[", "lengths[")) from None
    return checked


def _longest_prefix(config: BinConfig, bin_lengths: list[int], length: int) -> int:
    """R-BIN-5's monotonicity: the largest p <= length with bin + [p] fitting (0 if none),
    found by bisection over p."""
    lo, hi = 0, length  # invariant: a prefix of lo fits, or lo == 0
    if not fits(config, [*bin_lengths, 0]):
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(config, [*bin_lengths, mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo


def items(lengths: list[int], config: BinConfig) -> tuple[list[Piece], list[str]]:
    """B3: the pieces the algorithm places, and each example's fate."""
    pieces: list[Piece] = []
    fates: list[str] = []
    for index, length in enumerate(lengths):
        if config.algorithm == "wrapped" or fits(config, [length]):
            pieces.append(Piece(index, 0, length))
            fates.append("whole")  # R-BIN-14 turns it into "split" if it is cut
        elif config.overflow == "reject":
            # R-BIN-6: before any bin is made.
            raise ValueError(f"lengths[{index}]={length} does not fit alone in "
                             f"capacity={config.capacity} (cost={config.cost!r})")
        elif config.overflow == "truncate":
            # R-BIN-7: its longest prefix that fits alone.
            pieces.append(Piece(index, 0, _longest_prefix(config, [], length)))
            fates.append("truncated")
        elif config.overflow == "split":
            # R-BIN-8: front to back, each piece the longest prefix of the rest that fits.
            start = 0
            while start < length:
                cut = _longest_prefix(config, [], length - start)
                pieces.append(Piece(index, start, cut))
                start += cut
            fates.append("split")
        else:
            fates.append("dropped")  # R-BIN-9
    return pieces, fates


def decreasing(config: BinConfig, pieces: list[Piece]) -> list[Piece]:
    """B4: by size, largest first, ties in input order."""
    return sorted(pieces, key=lambda p: (-size(config, p.length), p.example, p.start))


def _first_fit(config: BinConfig, order: list[Piece], opened: int) -> list[list[Piece]]:
    """R-BIN-10 (with R-BIN-17's first `opened` items each opening a bin)."""
    bins: list[list[Piece]] = []
    for position, piece in enumerate(order):
        placed = False
        if position >= opened:
            for b in bins:
                if fits(config, [p.length for p in b] + [piece.length]):
                    b.append(piece)
                    placed = True
                    break
        if not placed:
            bins.append([piece])
    return bins


def _best_fit(config: BinConfig, order: list[Piece], opened: int) -> list[list[Piece]]:
    """R-BIN-12 (with R-BIN-17's first `opened` items each opening a bin)."""
    bins: list[list[Piece]] = []
    for position, piece in enumerate(order):
        best = None
        best_sum = -1
        if position >= opened:
            for number, b in enumerate(bins):
                if fits(config, [p.length for p in b] + [piece.length]):
                    total = sum(size(config, p.length) for p in b)
                    if total > best_sum:  # ties keep the lower number
                        best, best_sum = number, total
        if best is None:
            bins.append([piece])
        else:
            bins[best].append(piece)
    return bins


def _sequential(config: BinConfig, order: list[Piece]) -> list[list[Piece]]:
    """R-BIN-13."""
    bins: list[list[Piece]] = []
    for piece in order:
        if bins and fits(config, [p.length for p in bins[-1]] + [piece.length]):
            bins[-1].append(piece)
        else:
            bins.append([piece])
    return bins


def _wrapped(config: BinConfig, order: list[Piece], fates: list[str]) -> list[list[Piece]]:
    """R-BIN-14."""
    bins: list[list[Piece]] = []
    for item in order:
        rest = item
        while True:
            last = [p.length for p in bins[-1]] if bins else None
            if last is not None and fits(config, [*last, rest.length]):
                bins[-1].append(rest)
                break
            keep = 0 if last is None else _longest_prefix(config, last, rest.length)
            if keep >= 1:  # its longest prefix that fits stays; the rest is the next item
                bins[-1].append(Piece(rest.example, rest.start, keep))
                rest = Piece(rest.example, rest.start + keep, rest.length - keep)
                fates[rest.example] = "split"
            bins.append([])  # a new bin, where the rest is placed the same way
    return bins


def partition(weights: Any, k: int, equal_size: bool = False) -> list[list[int]]:
    """R-BIN-19: the largest differencing method (Karmarkar-Karp) into k sets, literally."""
    values = check_lengths(weights)
    k = as_size("k", k)
    if not isinstance(equal_size, bool):
        raise TypeError(f"equal_size must be a bool, got {type(equal_size).__name__}")
    n = len(values)
    if k > n:
        raise ValueError(f"k={k} parts need at least {k} items, got {n}")
    if equal_size and n % k != 0:
        raise ValueError(f"equal_size needs the item count to be a multiple of k={k}, got {n}")
    ranked = sorted(range(n), key=lambda i: (values[i], i))  # step 1
    groups = [[i] for i in ranked] if not equal_size else [
        ranked[j:j + k] for j in range(0, n, k)
    ]
    states: list[tuple[int, list[list[int]]]] = []  # (number, k sets of indices)
    for number, group in enumerate(groups):
        sets = [[i] for i in group] + [[] for _ in range(k - len(group))]
        states.append((number, _ordered(sets, values)))
    made = len(states)
    while len(states) > 1:  # step 3
        first = max(states, key=lambda s: (_spread(s[1], values), -s[0]))
        states.remove(first)
        second = max(states, key=lambda s: (_spread(s[1], values), -s[0]))
        states.remove(second)
        merged = [first[1][j] + second[1][k - 1 - j] for j in range(k)]
        states.append((made, _ordered(merged, values)))
        made += 1
    return [sorted(s) for s in states[0][1]]  # step 4


def _ordered(sets: list[list[int]], values: list[int]) -> list[list[int]]:
    """R-BIN-19 step 2: sum descending, then item count descending, then smallest index."""
    return sorted(
        sets,
        key=lambda s: (-sum(values[i] for i in s), -len(s), min(s) if s else math.inf),
    )


def _spread(sets: list[list[int]], values: list[int]) -> int:
    return sum(values[i] for i in sets[0]) - sum(values[i] for i in sets[-1])


def _karmarkar_karp(config: BinConfig, pieces: list[Piece]) -> list[list[Piece]]:
    """R-BIN-15."""
    sizes = [size(config, p.length) for p in pieces]
    step = config.bins_multiple_of
    k = ceil_to(max(config.min_bins, -(-sum(sizes) // config.capacity), 1), step)
    while k <= len(pieces):
        parts = partition(sizes, k)
        bins = [[pieces[i] for i in part] for part in parts]
        if all(b and fits(config, [p.length for p in b]) for b in bins):
            return bins
        k += step
    raise ValueError(f"bins_multiple_of={step}: {len(pieces)} items cannot fill a multiple of "
                     f"{step} bins")


def bin_lengths(lengths: Any, config: BinConfig) -> Bins:
    """B1-B5: the bins of examples of these lengths, and each example's fate."""
    if not isinstance(config, BinConfig):
        raise TypeError(f"config must be a BinConfig, got {type(config).__name__}")
    checked = check_lengths(lengths)  # R-BIN-1
    pieces, fates = items(checked, config)  # B3
    if not pieces:
        if config.min_bins > 1:
            raise ValueError(f"min_bins={config.min_bins} needs at least that many items, got 0")
        return Bins(bins=[], fates=fates)
    if config.min_bins > len(pieces):  # R-BIN-17
        raise ValueError(
            f"min_bins={config.min_bins} needs at least that many items, got {len(pieces)}"
        )
    if config.algorithm == "karmarkar_karp":
        bins = _karmarkar_karp(config, pieces)  # R-BIN-15
    elif config.algorithm == "sequential":
        bins = _sequential(config, pieces)  # R-BIN-13
    elif config.algorithm == "wrapped":
        bins = _wrapped(config, pieces, fates)  # R-BIN-14
    else:
        bins = _greedy(config, pieces)
    if config.order == "input":  # R-BIN-16
        bins = [sorted(b, key=lambda p: (p.example, p.start)) for b in bins]
    return Bins(bins=bins, fates=fates)  # R-BIN-18


def _greedy(config: BinConfig, pieces: list[Piece]) -> list[list[Piece]]:
    """R-BIN-10, R-BIN-11 (first fit decreasing), R-BIN-12, with R-BIN-17's bin count."""
    order = pieces if config.algorithm == "first_fit" else decreasing(config, pieces)
    place = _best_fit if config.algorithm == "best_fit_decreasing" else _first_fit
    opened = config.min_bins
    while True:
        bins = place(config, order, opened)
        if len(bins) % config.bins_multiple_of == 0:
            return bins
        opened = ceil_to(len(bins), config.bins_multiple_of)  # R-BIN-17
        if opened > len(order):
            raise ValueError(
                f"bins_multiple_of={config.bins_multiple_of}: {len(order)} items cannot fill "
                f"{opened} bins"
            )


def bin_costs(bins: Bins, config: BinConfig) -> list[int]:
    """R-BIN-20: a bin's cost: the sum of its sizes ("tokens"), its plan's total ("rows")."""
    if config.cost == "tokens":
        return [sum(lengths) for lengths in bins.lengths()]
    assert config.pack is not None
    return [plan_thd(lengths, config.pack).total for lengths in bins.lengths()]


def ranks(bins: Bins, config: BinConfig, dp_size: int) -> list[list[int]]:
    """R-BIN-20: the bin numbers each data-parallel rank takes."""
    dp_size = as_size("dp_size", dp_size)
    if len(bins.bins) % dp_size != 0:
        raise ValueError(f"dp_size={dp_size} does not divide the {len(bins.bins)} bins")
    return partition(bin_costs(bins, config), dp_size, equal_size=True)


def capacity_sum(config: BinConfig) -> int:
    """B2: S_max, the largest sum of sizes a bin may hold: the capacity under "tokens"; under
    "rows" the longest example that fits alone, which is a multiple of A (R-BIN-4)."""
    if config.cost == "tokens":
        return config.capacity
    return _longest_prefix(config, [], INT32_MAX)


def lower_bound(lengths: Any, config: BinConfig) -> int:
    """B7: Martello and Toth's L2 on the items' sizes with capacity S_max; for `wrapped`, which
    may cut any item, L1 = ceil(sum / S_max)."""
    pieces, _ = items(check_lengths(lengths), config)
    sizes = [size(config, p.length) for p in pieces]
    cap = capacity_sum(config)
    best = max(-(-sum(sizes) // cap), 1 if sizes else 0)  # L1; any item needs a bin
    if config.algorithm == "wrapped":
        return best
    # L2(alpha) changes only where alpha passes a size, so those (and 0) are the alphas to try.
    for alpha in sorted({0, *(s for s in sizes if s <= cap // 2)}):
        big = [s for s in sizes if s > cap - alpha]
        mid = [s for s in sizes if cap // 2 < s <= cap - alpha]
        small = [s for s in sizes if alpha <= s <= cap // 2]
        spare = len(mid) * cap - sum(mid)
        extra = max(0, -(-(sum(small) - spare) // cap))
        best = max(best, len(big) + len(mid) + extra)
    return best


def optimum(lengths: Any, config: BinConfig) -> int:
    """B7: the fewest bins that hold the items of B3, by dynamic programming over subsets
    (small inputs only: 2**n states)."""
    pieces, _ = items(check_lengths(lengths), config)
    n = len(pieces)
    if n > 16:
        raise ValueError(f"optimum is exponential: at most 16 items, got {n}")
    full = (1 << n) - 1
    fit = [fits(config, [pieces[i].length for i in range(n) if mask >> i & 1])
           for mask in range(full + 1)]
    best = [0] + [n + 1] * full
    for mask in range(1, full + 1):
        low = mask & -mask  # the lowest item always goes into the bin chosen here
        sub = mask
        while sub:
            if sub & low and fit[sub]:
                best[mask] = min(best[mask], best[mask ^ sub] + 1)
            sub = (sub - 1) & mask
    return best[full]


def as_config(fields: dict[str, Any]) -> BinConfig:
    """A BinConfig from plain data (the worked examples' JSON)."""
    fields = dict(fields)
    if "pack" in fields and fields["pack"] is not None:
        fields["pack"] = PackConfig(**fields["pack"])
    for key in ("capacity", "min_bins", "bins_multiple_of"):
        if key in fields:
            fields[key] = as_integer(key, fields[key])
    return BinConfig(**fields)
