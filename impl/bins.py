# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""The bin step on the host: which examples share a pack (spec/bins.md).

The spec says a bin fits when its plan builds within the capacity (R-BIN-5); here that is two
numbers worked out once: S_max, the largest sum of sizes a bin may hold, and N_max, the most
pieces it may hold (B2). Every algorithm then runs on integer sizes with an O(log) structure:
a max-tree over bins for first fit, a blocked sorted list of (room, bin) keys for best fit, a
heap of states for Karmarkar-Karp. Pure Python and torch only, like the rest of this package.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass
from typing import Any, NamedTuple

from .config import INT32_MAX, PackConfig, as_integer, ceil_to
from .plan import Plan, check_lengths, host_lengths, plan_thd

ALGORITHMS = ("first_fit", "first_fit_decreasing", "best_fit_decreasing", "sequential",
              "wrapped", "karmarkar_karp")
COSTS = ("tokens", "rows")
OVERFLOWS = ("reject", "truncate", "split", "drop")
ORDERS = ("input", "placement")
_UNLIMITED = 1 << 62


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}: {name}={value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, "
                         f"got {name}={value!r}")
    return value


def _size_field(name: str, value: Any) -> int:
    number = as_integer(name, value)
    if number < 1:
        raise ValueError(f"{name} must be >= 1, got {name}={number}")
    return number


class Piece(NamedTuple):
    """R-BIN-4: `length` tokens of example `example` from `start`."""

    example: int
    start: int
    length: int


@dataclass(frozen=True)
class BinConfig:
    """R-BIN-2, checked on construction (R-BIN-3 under cost="rows")."""

    capacity: int
    algorithm: str = "first_fit_decreasing"
    cost: str = "tokens"
    pack: PackConfig | None = None
    overflow: str = "reject"
    order: str = "input"
    min_bins: int = 1
    bins_multiple_of: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", _size_field("capacity", self.capacity))
        object.__setattr__(self, "algorithm", _choice("algorithm", self.algorithm, ALGORITHMS))
        object.__setattr__(self, "cost", _choice("cost", self.cost, COSTS))
        if self.cost == "rows" and not isinstance(self.pack, PackConfig):
            raise TypeError(
                f"pack must be a PackConfig under cost='rows', got {type(self.pack).__name__}"
            )
        if self.cost == "tokens" and self.pack is not None:
            raise ValueError(f"pack is read only under cost='rows', got cost='tokens' and "
                             f"pack={self.pack!r}")
        object.__setattr__(self, "overflow", _choice("overflow", self.overflow, OVERFLOWS))
        if self.algorithm == "wrapped" and self.overflow != "split":
            raise ValueError(f"algorithm='wrapped' cuts examples across bins and takes only "
                             f"overflow='split', got overflow={self.overflow!r}")
        object.__setattr__(self, "order", _choice("order", self.order, ORDERS))
        object.__setattr__(self, "min_bins", _size_field("min_bins", self.min_bins))
        object.__setattr__(
            self, "bins_multiple_of", _size_field("bins_multiple_of", self.bins_multiple_of)
        )
        if self.algorithm in ("sequential", "wrapped"):
            for name in ("min_bins", "bins_multiple_of"):
                if getattr(self, name) != 1:
                    raise ValueError(f"algorithm={self.algorithm!r} keeps one open bin and "
                                     f"takes no {name}, got {name}={getattr(self, name)}")
        if self.cost == "rows":
            s_max, n_max = self.limits
            if self.align > s_max or n_max < 1:  # R-BIN-3
                raise ValueError(
                    f"capacity={self.capacity} holds no token under cost='rows' and "
                    f"{self.pack!r}: one token costs more than the capacity or has no plan")

    @property
    def align(self) -> int:
        """A (R-ALIGN-2) under "rows": sizes are multiples of it; 1 under "tokens"."""
        return 1 if self.pack is None else self.pack.sequence_align

    @property
    def limits(self) -> tuple[int, int]:
        """B2: (S_max, N_max), the most a fitting bin's sizes sum to and the most pieces it
        holds; S_max < 0 when no bin fits."""
        if self.pack is None:
            return self.capacity, _UNLIMITED
        pack = self.pack
        cap = min(self.capacity, INT32_MAX)
        floor = pack.cp_size * (pack.min_local_rows or 0)  # R-TOTAL-3
        if pack.fixed_total is not None:  # R-TOTAL-7: T = N whenever S <= N
            s_max = pack.fixed_total if pack.fixed_total <= cap else -1
            if floor > pack.fixed_total:
                s_max = -1  # R-ERR-15 for every bin
        else:
            s_max = cap // pack.total_modulus * pack.total_modulus  # R-TOTAL-4
            if floor > s_max:
                s_max = -1
        if s_max >= 0:
            s_max = s_max // self.align * self.align
        n_max = _UNLIMITED
        if pack.max_num_seqs is not None:  # R-ERR-13
            n_max = pack.max_num_seqs - (1 if pack.tail == "segment" else 0)
        return s_max, n_max


@dataclass(frozen=True)
class Bins:
    """R-BIN-16, R-BIN-18: the bins (lists of pieces) and every example's fate."""

    bins: list[list[Piece]]
    fates: list[str]

    def indices(self) -> list[list[int]]:
        return [[piece.example for piece in b] for b in self.bins]

    def lengths(self) -> list[list[int]]:
        return [[piece.length for piece in b] for b in self.bins]


def _host_list(values: Any, name: str) -> list[int]:
    """R-BIN-1 as impl's plan reads lengths (host_lengths), zero examples allowed."""
    if isinstance(values, (list, tuple)) and not values:
        return []
    lengths = host_lengths(values, name)
    if lengths.numel() == 0:  # an empty array or tensor of an integer dtype: no example
        return []
    check_lengths(lengths, name)
    return lengths.tolist()


class _Items:
    """B3: the pieces the algorithm places, as parallel lists, and each example's fate."""

    def __init__(self, lengths: list[int], config: BinConfig) -> None:
        s_max, _ = config.limits
        a = config.align
        alone = s_max // a * a  # the longest piece that fits alone (R-BIN-7, R-BIN-8)
        self.index: list[int] = []
        self.start: list[int] = []
        self.length: list[int] = []
        self.fates: list[str] = []
        wrapped = config.algorithm == "wrapped"
        for i, length in enumerate(lengths):
            if wrapped or ceil_to(length, a) <= s_max:
                self._add(i, 0, length)
                self.fates.append("whole")
            elif config.overflow == "reject":  # R-BIN-6
                raise ValueError(f"lengths[{i}]={length} does not fit alone in "
                                 f"capacity={config.capacity} (cost={config.cost!r})")
            elif config.overflow == "truncate":  # R-BIN-7
                self._add(i, 0, alone)
                self.fates.append("truncated")
            elif config.overflow == "split":  # R-BIN-8
                for start in range(0, length, alone):
                    self._add(i, start, min(alone, length - start))
                self.fates.append("split")
            else:  # R-BIN-9
                self.fates.append("dropped")
        self.size = [ceil_to(x, a) for x in self.length] if a > 1 else list(self.length)

    def _add(self, index: int, start: int, length: int) -> None:
        self.index.append(index)
        self.start.append(start)
        self.length.append(length)

    def piece(self, item: int) -> Piece:
        return Piece(self.index[item], self.start[item], self.length[item])


class _MaxTree:
    """Bins' rooms in a max-tree: the lowest-numbered bin with room >= s in O(log bins)."""

    def __init__(self, capacity: int) -> None:
        self.leaves = 1
        while self.leaves < max(capacity, 1):
            self.leaves *= 2
        self.tree = [-1] * (2 * self.leaves)

    def set(self, bin_number: int, room: int) -> None:
        node = bin_number + self.leaves
        tree = self.tree
        tree[node] = room
        node //= 2
        while node:
            best = tree[2 * node] if tree[2 * node] > tree[2 * node + 1] else tree[2 * node + 1]
            if tree[node] == best:
                break
            tree[node] = best
            node //= 2

    def first(self, need: int) -> int:
        tree = self.tree
        if tree[1] < need:
            return -1
        node = 1
        leaves = self.leaves
        while node < leaves:
            node *= 2
            if tree[node] < need:
                node += 1
        return node - leaves


def _first_fit(items: _Items, order: list[int], opened: int, s_max: int, n_max: int
               ) -> list[list[int]]:
    """R-BIN-10, R-BIN-11 (R-BIN-17: the first `opened` items each open a bin). Runs of equal
    sizes fill the found bin at once: first fit would put each into that same bin."""
    size = items.size
    bins: list[list[int]] = []
    sums: list[int] = []
    tree = _MaxTree(len(order))
    pos = 0
    for pos in range(min(opened, len(order))):
        item = order[pos]
        bins.append([item])
        sums.append(size[item])
        tree.set(len(bins) - 1, s_max - size[item] if n_max > 1 else -1)
    pos = min(opened, len(order))
    while pos < len(order):
        s = size[order[pos]]
        run = pos + 1
        while run < len(order) and size[order[run]] == s:
            run += 1
        while pos < run:
            b = tree.first(s)
            if b < 0:
                b = len(bins)
                bins.append([])
                sums.append(0)
            room = s_max - sums[b]
            take = run - pos
            take = min(take, n_max - len(bins[b]))
            if s:
                take = min(take, room // s)
            bins[b].extend(order[pos:pos + take])
            sums[b] += take * s
            pos += take
            tree.set(b, s_max - sums[b] if len(bins[b]) < n_max else -1)
    return bins


class _Rooms:
    """Open bins as sorted keys room * 2**32 + bin: the fullest bin with room >= s first,
    ties the lowest number (R-BIN-12). Blocks of sorted lists keep inserts cheap."""

    BLOCK = 512
    SHIFT = 32

    def __init__(self) -> None:
        self.blocks: list[list[int]] = []
        self.heads: list[int] = []

    def add(self, room: int, bin_number: int) -> None:
        key = (room << self.SHIFT) | bin_number
        if not self.blocks:
            self.blocks.append([key])
            self.heads.append(key)
            return
        at = max(bisect_right(self.heads, key) - 1, 0)
        block = self.blocks[at]
        insort(block, key)
        self.heads[at] = block[0]
        if len(block) > 2 * self.BLOCK:
            self.blocks[at:at + 1] = [block[:self.BLOCK], block[self.BLOCK:]]
            self.heads[at:at + 1] = [block[0], block[self.BLOCK]]

    def pop_at_least(self, room: int) -> tuple[int, int] | None:
        """Remove and return (room, bin) of the smallest room >= `room`, lowest bin first."""
        key = room << self.SHIFT
        at = max(bisect_right(self.heads, key) - 1, 0)
        while at < len(self.blocks):
            block = self.blocks[at]
            j = bisect_left(block, key)
            if j < len(block):
                found = block.pop(j)
                if block:
                    self.heads[at] = block[0]
                else:
                    del self.blocks[at]
                    del self.heads[at]
                return found >> self.SHIFT, found & ((1 << self.SHIFT) - 1)
            at += 1
        return None


def _best_fit(items: _Items, order: list[int], opened: int, s_max: int, n_max: int
              ) -> list[list[int]]:
    """R-BIN-12 (R-BIN-17: the first `opened` items each open a bin)."""
    size = items.size
    bins: list[list[int]] = []
    sums: list[int] = []
    rooms = _Rooms()
    for pos, item in enumerate(order):
        found = None if pos < opened else rooms.pop_at_least(size[item])
        if found is None:
            b = len(bins)
            bins.append([item])
            sums.append(size[item])
        else:
            b = found[1]
            bins[b].append(item)
            sums[b] += size[item]
        if len(bins[b]) < n_max:
            rooms.add(s_max - sums[b], b)
    return bins


def _sequential(items: _Items, order: list[int], s_max: int, n_max: int) -> list[list[int]]:
    """R-BIN-13."""
    size = items.size
    bins: list[list[int]] = []
    total = 0
    for item in order:
        if bins and total + size[item] <= s_max and len(bins[-1]) < n_max:
            bins[-1].append(item)
            total += size[item]
        else:
            bins.append([item])
            total = size[item]
    return bins


def _wrapped(items: _Items, config: BinConfig) -> list[list[Piece]]:
    """R-BIN-14: cut where a bin is full; `items` are whole examples in input order."""
    s_max, n_max = config.limits
    a = config.align
    bins: list[list[Piece]] = []
    total = 0
    for item in range(len(items.length)):
        index, start, rest = items.index[item], 0, items.length[item]
        while True:
            if bins and len(bins[-1]) < n_max:
                if total + ceil_to(rest, a) <= s_max:
                    bins[-1].append(Piece(index, start, rest))
                    total += ceil_to(rest, a)
                    break
                keep = (s_max - total) // a * a
                if keep >= 1:
                    bins[-1].append(Piece(index, start, keep))
                    start, rest = start + keep, rest - keep
                    items.fates[index] = "split"
            bins.append([])
            total = 0
    return bins


def _kk_order(sets: list[list[Any]]) -> list[list[Any]]:
    """R-BIN-19 step 2: sum descending, count descending, smallest index ascending."""
    return sorted(sets, key=lambda s: (-s[0], -len(s[1]), s[2]))


def _kk(values: list[int], k: int, equal_size: bool) -> list[list[int]]:
    """R-BIN-19 with a heap of states keyed (-spread, number); a set is [sum, indices, min]."""
    n = len(values)
    ranked = sorted(range(n), key=lambda i: (values[i], i))
    groups = [ranked[j:j + k] for j in range(0, n, k)] if equal_size else [[i] for i in ranked]
    heap: list[tuple[int, int, list[list[Any]]]] = []
    none = n  # an empty set's smallest index: after every real one
    for number, group in enumerate(groups):
        sets: list[list[Any]] = [[values[i], [i], i] for i in group]
        sets += [[0, [], none] for _ in range(k - len(group))]
        sets = _kk_order(sets)
        heap.append((sets[-1][0] - sets[0][0], number, sets))
    heapq.heapify(heap)
    made = len(heap)
    while len(heap) > 1:
        _, _, first = heapq.heappop(heap)
        _, _, second = heapq.heappop(heap)
        merged = []
        for j in range(k):
            x, y = first[j], second[k - 1 - j]
            merged.append([x[0] + y[0], x[1] + y[1], min(x[2], y[2])])
        merged = _kk_order(merged)
        heapq.heappush(heap, (merged[-1][0] - merged[0][0], made, merged))
        made += 1
    return [sorted(s[1]) for s in heap[0][2]]


def partition(weights: Any, k: int, equal_size: bool = False) -> list[list[int]]:
    """R-BIN-19: Karmarkar-Karp's largest differencing method into `k` sets."""
    values = _host_list(weights, "lengths")
    k = _size_field("k", k)
    if not isinstance(equal_size, bool):
        raise TypeError(f"equal_size must be a bool, got {type(equal_size).__name__}")
    if k > len(values):
        raise ValueError(f"k={k} parts need at least {k} items, got {len(values)}")
    if equal_size and len(values) % k != 0:
        raise ValueError(
            f"equal_size needs the item count to be a multiple of k={k}, got {len(values)}")
    return _kk(values, k, equal_size)


def _karmarkar_karp(items: _Items, config: BinConfig) -> list[list[int]]:
    """R-BIN-15."""
    s_max, n_max = config.limits
    size = items.size
    step = config.bins_multiple_of
    k = ceil_to(max(config.min_bins, -(-sum(size) // config.capacity), 1), step)
    while k <= len(size):
        parts = _kk(size, k, False)
        if all(p and len(p) <= n_max and sum(size[i] for i in p) <= s_max for p in parts):
            return parts
        k += step
    raise ValueError(f"bins_multiple_of={step}: {len(size)} items cannot fill a multiple of "
                     f"{step} bins")


def _greedy(items: _Items, config: BinConfig) -> list[list[int]]:
    """R-BIN-10..12 with R-BIN-17's bin count."""
    s_max, n_max = config.limits
    order = list(range(len(items.size)))
    if config.algorithm != "first_fit":
        order = _stable_decreasing(items.size)
    place = _best_fit if config.algorithm == "best_fit_decreasing" else _first_fit
    opened = config.min_bins
    while True:
        bins = place(items, order, opened, s_max, n_max)
        if len(bins) % config.bins_multiple_of == 0:
            return bins
        opened = ceil_to(len(bins), config.bins_multiple_of)
        if opened > len(order):
            raise ValueError(f"bins_multiple_of={config.bins_multiple_of}: {len(order)} items "
                             f"cannot fill {opened} bins")


def _stable_decreasing(size: list[int]) -> list[int]:
    """Indices by size, largest first, ties in input order."""
    return sorted(range(len(size)), key=lambda i: -size[i])


def bin_lengths(lengths: Any, config: BinConfig) -> Bins:
    """The bins of examples of these lengths and each example's fate (spec/bins.md B1-B5).

    `lengths` is a list or tuple of ints or a 1-D integer tensor (a device tensor costs one
    copy to the host). Raises TypeError/ValueError per R-BIN-1..3, R-BIN-6, R-BIN-17.
    """
    if not isinstance(config, BinConfig):
        raise TypeError(f"config must be a BinConfig, got {type(config).__name__}")
    items = _Items(_host_list(lengths, "lengths"), config)
    n = len(items.size)
    if config.min_bins > n and (n or config.min_bins > 1):  # R-BIN-17
        raise ValueError(f"min_bins={config.min_bins} needs at least that many items, got {n}")
    if n == 0:
        return Bins(bins=[], fates=items.fates)
    if config.algorithm == "wrapped":
        bins = [b for b in _wrapped(items, config) if b]
    else:
        if config.algorithm == "karmarkar_karp":
            numbers = _karmarkar_karp(items, config)
        elif config.algorithm == "sequential":
            s_max, n_max = config.limits
            numbers = _sequential(items, list(range(n)), s_max, n_max)
        else:
            numbers = _greedy(items, config)
        bins = [[items.piece(i) for i in b] for b in numbers]
    if config.order == "input":  # R-BIN-16
        bins = [sorted(b) for b in bins]
    return Bins(bins=bins, fates=items.fates)


def bin_costs(bins: Bins, config: BinConfig) -> list[int]:
    """R-BIN-20: each bin's cost: its tokens, or its plan's total under cost="rows"."""
    if config.pack is None:
        return [sum(lengths) for lengths in bins.lengths()]
    return [p.total for p in plans(bins, config)]


def plans(bins: Bins, config: BinConfig) -> list[Plan]:
    """Each bin's THD plan under cost="rows" (each total within the capacity, R-BIN-5)."""
    if config.pack is None:
        raise ValueError("plans need cost='rows' and a pack config, got cost='tokens'")
    return [plan_thd(lengths, config.pack) for lengths in bins.lengths()]


def ranks(bins: Bins, config: BinConfig, dp_size: int) -> list[list[int]]:
    """R-BIN-20: the bin numbers each data-parallel rank takes."""
    dp_size = _size_field("dp_size", dp_size)
    if len(bins.bins) % dp_size != 0:
        raise ValueError(f"dp_size={dp_size} does not divide the {len(bins.bins)} bins")
    return _kk(bin_costs(bins, config), dp_size, True)
