"""Fake binners for the bin tier's own tests: impl's binner with one planted fault each."""

from __future__ import annotations

from typing import Any

import impl
from impl import bins as ib
from thd_packing.conformance.bins_protocol import BinDeclared, Binned

Bins = list[list[tuple[int, int, int]]]


class Honest:
    """impl's first fit decreasing, as impl returns it."""

    name = "fake-binner"
    declared_bins = BinDeclared(algorithms=frozenset({"first_fit_decreasing"}),
                                overflow=frozenset({"reject", "split"}), order="input")

    def __init__(self) -> None:
        self.calls = 0

    def bin(self, lengths: Any, config: dict[str, Any]) -> Binned:
        self.calls += 1
        fields = dict(config)
        if isinstance(fields.get("pack"), dict):
            fields["pack"] = impl.PackConfig(**fields["pack"])
        out = ib.bin_lengths(lengths, self.config(fields))
        return Binned(self.spoil([[tuple(p) for p in b] for b in out.bins]))

    def config(self, fields: dict[str, Any]) -> ib.BinConfig:
        return ib.BinConfig(**fields)

    def spoil(self, bins: Bins) -> Bins:
        return bins


class LostExample(Honest):
    """Forgets the last piece of the last bin (a token budget's off-by-one)."""

    def spoil(self, bins: Bins) -> Bins:
        if bins:
            bins[-1] = bins[-1][:-1]
        return [b for b in bins if b]


class OverflowingBin(Honest):
    """Merges its first two bins: one pack over the capacity."""

    def spoil(self, bins: Bins) -> Bins:
        return [bins[0] + bins[1], *bins[2:]] if len(bins) > 1 else bins


class UndeclaredSplit(Honest):
    """Cuts the first example of two or more tokens in two, though it fits."""

    def spoil(self, bins: Bins) -> Bins:
        for b in bins:
            for k, (example, start, length) in enumerate(b):
                if length >= 2:
                    half = length // 2
                    b[k:k + 1] = [(example, start, half), (example, start + half, length - half)]
                    return bins
        return bins


class Nondeterministic(Honest):
    """Lists its bins in reverse on every other call."""

    def spoil(self, bins: Bins) -> Bins:
        return bins[::-1] if self.calls % 2 else bins


class CrashesOnValid(Honest):
    """Raises a RuntimeError on three examples or more."""

    def bin(self, lengths: Any, config: dict[str, Any]) -> Binned:
        if len(lengths) >= 3:
            raise RuntimeError("index out of range in the segment tree")
        return super().bin(lengths, config)


class AcceptsZeroCapacity(Honest):
    """Treats a capacity below 1 as 1 instead of refusing it."""

    def config(self, fields: dict[str, Any]) -> ib.BinConfig:
        capacity = fields["capacity"]
        if isinstance(capacity, int) and capacity < 1:
            fields = {**fields, "capacity": 1}
        return ib.BinConfig(**fields)
