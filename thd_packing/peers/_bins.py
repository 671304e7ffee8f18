"""Shared glue of the binner adapters (`*_bins.py`): reading the suite's `BinConfig` keywords.

Each adapter states what its peer has a counterpart for; `read_config` returns the fields with
the spec's defaults filled in and raises `NotDeclared` naming the first field the peer
cannot honour (R-BIN-2's fields; the suite asks for a refused field only where the target
declared it). `algorithm` is honoured when it is the algorithm the target claims; a target that
claims none runs its own and refuses any explicit value. `order` is honoured when it is the
order the target's bins list their pieces in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from thd_packing.conformance.protocol import NotDeclared

FIELDS = ("capacity", "algorithm", "cost", "pack", "overflow", "order", "min_bins",
          "bins_multiple_of")


def read_config(config: Mapping[str, Any], *, target: str, algorithm: str | None,
                order: str | None, overflow: frozenset[str] = frozenset({"reject"}),
                counts: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The fields of `config` the peer can honour, defaults filled in; `counts` the count
    fields ("min_bins", "bins_multiple_of") it has a counterpart for."""
    for key in config:
        if key not in FIELDS:
            raise NotDeclared(f"{target}: no counterpart for config field {key!r}")
    out: dict[str, Any] = {
        "capacity": config["capacity"],
        "algorithm": config.get("algorithm"),
        "cost": config.get("cost", "tokens"),
        "pack": config.get("pack"),
        "overflow": config.get("overflow", "reject"),
        "order": config.get("order", "input"),
        "min_bins": config.get("min_bins", 1),
        "bins_multiple_of": config.get("bins_multiple_of", 1),
    }
    if out["algorithm"] is not None and out["algorithm"] != algorithm:
        raise NotDeclared(f"{target}: algorithm={out['algorithm']!r}: it runs "
                                  f"{algorithm or 'its own algorithm'} only")
    if out["cost"] != "tokens" or out["pack"] is not None:
        raise NotDeclared(f"{target}: cost={out['cost']!r} / pack: it counts real "
                                  "tokens only (no PackConfig, no rows)")
    if out["overflow"] not in overflow:
        raise NotDeclared(f"{target}: overflow={out['overflow']!r}: it has "
                                  f"{sorted(overflow)} only")
    if out["order"] != (order or "placement"):
        raise NotDeclared(f"{target}: order={out['order']!r}: its bins list their "
                                  f"pieces in {order or 'its own'} order")
    for name in ("min_bins", "bins_multiple_of"):
        if out[name] != 1 and name not in counts:
            raise NotDeclared(f"{target}: no counterpart for {name}={out[name]}")
    return out


def token_counts(lengths: Any) -> list[int]:
    """Glue for adapters that build token sequences: each length as an int, refused (TypeError,
    ValueError) where no sequence has it: such a peer's lengths are `len(tokens)`, validated
    by construction (declared `validated_elsewhere`)."""
    out = []
    for index, length in enumerate(lengths):
        if isinstance(length, bool) or not hasattr(length, "__index__"):
            raise TypeError(f"lengths[{index}]={length!r} is no token count")
        if int(length) < 0:
            raise ValueError(f"lengths[{index}]={length!r} is no token count")
        out.append(int(length))
    return out


# ---- judging a binner target by hand (its tests and findings page use these) ----

Piece = tuple[int, int, int]


def draw(rng: Any, *, zero: bool = False, big: bool = False) -> tuple[list[int], int]:
    """Random lengths that each fit a random capacity (`zero`: lengths of 0 too; `big`: up to
    40 examples, else up to 12)."""
    capacity = int(rng.integers(1, 65))
    n = int(rng.integers(0, 41 if big else 13))
    low = 0 if zero else 1
    return [int(v) for v in rng.integers(low, capacity + 1, size=n)], capacity


def checked(target: Any, lengths: list[int], config: Mapping[str, Any],
            twice: bool = True) -> list[list[Piece]]:
    """The target's bins through every contract check (`twice`: with determinism)."""
    import numpy as np

    from thd_packing.conformance.bins_contract import check_bins

    array = np.asarray(lengths, dtype=np.int64)
    first = target.bin(array, dict(config))
    again = target.bin(array, dict(config)).bins if twice else None
    return check_bins(lengths, first.bins, config, first.fates, again)


def reference(lengths: list[int], config: Mapping[str, Any]) -> list[list[Piece]]:
    """The reference's bins as pieces."""
    from thd_packing.reference import bins as rb

    out = rb.bin_lengths(lengths, rb.as_config(dict(config)))
    return [[(p.example, p.start, p.length) for p in b] for b in out.bins]


def as_sets(bins: list[list[Piece]]) -> list[frozenset[Piece]]:
    """Each bin as a set of pieces, bins in their order."""
    return [frozenset(b) for b in bins]


def size_multisets(bins: list[list[Piece]]) -> list[tuple[int, ...]]:
    """Each bin as its sorted piece lengths, bins in their order (blind to which of two equal
    lengths is which example)."""
    return [tuple(sorted(p[2] for p in b)) for b in bins]
