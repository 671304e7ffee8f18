"""What the bin tier draws: lengths and a `BinConfig` within what the binner declares."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from thd_packing.reference import PackConfig, plan_thd

from .bins_protocol import BinDeclared

# Pack configs for cost="rows" (as PackConfig keyword arguments): no alignment, TP and CP
# zigzag, FP8 with a bucket, and static metadata that limits the sequences per pack.
PACKS: list[dict[str, Any]] = [
    {},
    {"tp_size": 2, "cp_size": 4},
    {"tp_size": 2, "fp8": True, "bucket": 512},
    {"cp_size": 2, "max_num_seqs": 4, "tail": "segment"},
]
MAX_ITEMS = 40


def declared_of(adapter: Any) -> BinDeclared:
    declared = getattr(adapter, "declared_bins", None)
    return declared if isinstance(declared, BinDeclared) else BinDeclared()


@st.composite
def bin_cases(draw: st.DrawFn, declared: BinDeclared, distinct: bool = False,
              small: bool = False) -> tuple[list[int], dict[str, Any]]:
    """(lengths, config): capacities from 1 to 2**16, lengths from 0 past the capacity, every
    cost, overflow policy and bin count the binner declares. `distinct`: no two lengths equal
    (the algorithm's choices, not its tie-breaks); `small`: at most 9 items (exact optimum)."""
    cost = draw(st.sampled_from(sorted(declared.costs)))
    config: dict[str, Any] = {"capacity": 0, "cost": cost}
    if declared.algorithms:
        config["algorithm"] = draw(st.sampled_from(sorted(declared.algorithms)))
    if cost == "rows":
        config["pack"] = draw(st.sampled_from(PACKS))
        low = _one_token(config)
        config["capacity"] = draw(st.integers(low, max(low, 4096)))
    else:
        config["capacity"] = draw(st.one_of(st.integers(1, 64), st.integers(1, 2**16)))
    overflows = sorted(declared.overflow)
    if config.get("algorithm") == "wrapped":  # R-BIN-2: wrapped takes only "split"
        overflows = ["split"]
    config["overflow"] = draw(st.sampled_from(overflows))
    if config.get("algorithm") in ("sequential", "wrapped"):
        declared = BinDeclared(**{**vars(declared),
                                  "features": declared.features - {"min_bins",
                                                                   "bins_multiple_of"}})
    config["order"] = declared.order or "placement"  # no order claimed: none checked
    limit = 9 if small else min(declared.max_items or MAX_ITEMS, MAX_ITEMS)
    capacity = config["capacity"]
    top = 2 * capacity if config["overflow"] != "reject" else capacity
    least = 0 if "zero_length" not in declared.lacks else 1
    length = st.one_of(st.integers(least, max(least, capacity // 3)),
                       st.integers(least, max(least, top)))
    if least == 0:
        length = st.one_of(st.just(0), length)
    # No example, and examples of no token only, are judged once each, by
    # test_bins.test_bin_degenerate: no property is shrunk to them.
    strategy = st.lists(length, min_size=1, max_size=limit, unique=distinct).filter(any)
    lengths = draw(strategy)
    if "min_bins" in declared.features and lengths and draw(st.booleans()):
        config["min_bins"] = draw(st.integers(1, len(lengths)))
    if "bins_multiple_of" in declared.features and lengths and draw(st.booleans()):
        config["bins_multiple_of"] = draw(st.integers(1, min(8, len(lengths))))
    return lengths, config


def _one_token(config: dict[str, Any]) -> int:
    """The rows one token costs under the config's pack: the least capacity R-BIN-3 allows."""
    return int(plan_thd([1], PackConfig(**config["pack"])).total)


@st.composite
def partition_cases(draw: st.DrawFn, declared: BinDeclared, distinct: bool = False
                    ) -> tuple[list[int], int, bool]:
    """(weights, k, equal_size) with 1 <= k <= len(weights); equal sizes where declared."""
    weights = draw(st.lists(st.integers(0, 2**16), min_size=1, max_size=MAX_ITEMS,
                            unique=distinct))
    k = draw(st.integers(1, len(weights)))
    equal_size = "equal_size" in declared.features and draw(st.booleans())
    if equal_size:
        weights = weights[: len(weights) - len(weights) % k]
    return weights, k, equal_size
