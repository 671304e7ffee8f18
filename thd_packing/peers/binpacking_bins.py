"""The `binpacking` library 2.0.1's `to_constant_volume` as a binner target (spec/bins.md).

`to_constant_volume(d, V_max, weight_pos, key, lower_bound, upper_bound)`, imported from the
installed package and called the way ms-swift calls it: `d` a list of `(example, length)`
tuples, `weight_pos=1`. Its bins are lists of those tuples; the adapter hands back each bin as
the example indices it holds, in the order it holds them. Its docstring: "Distribute items to
minimum number of bins with fixed maximum volume"; its loop sorts the weights decreasingly and
puts each into "the emptiest bin where this item fits (Least Loaded Fit)": worst fit
decreasing, which is none of the spec's algorithms, so it claims none and is judged on the
contract. Findings: docs/findings/bins-binpacking.md.
"""

from __future__ import annotations

from typing import Any

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _binning
from ._wiring import Wiring, fixed, wired

EXPECTED_VERSION = "2.0.1"
ENTRY = "binpacking.to_constant_volume.to_constant_volume"

WIRING: Wiring = {
    ENTRY: {
        "d": wired("lengths, as (example, length) tuples, as ms-swift passes them"),
        "V_max": wired("capacity"),
        "weight_pos": fixed("1, the length's place in each tuple (ms-swift's call)"),
        "key": fixed("None: weight_pos reads the weight (ms-swift's call)"),
        "lower_bound": fixed("None: a lower bound drops short examples, which no overflow "
                             "policy does"),
        "upper_bound": wired("overflow='drop': upper_bound=capacity leaves out every example "
                             "longer than the capacity (R-BIN-9); None otherwise"),
    },
}


class BinpackingToConstantVolume:
    """`to_constant_volume([(i, L_i)], capacity, weight_pos=1)`; overflow="drop" adds
    `upper_bound=capacity`. overflow="reject" is its plain call: it has no rejection of its
    own, so the suite sees what the plain call does with an example longer than V_max."""

    name = "binpacking"
    declared_bins = BinDeclared(
        overflow=frozenset({"reject", "drop"}), order="placement",
        features=frozenset(),
        notes={"algorithm": "worst fit decreasing (its loop: the emptiest bin that fits); "
                            "none of R-BIN-10..15"})

    def __init__(self) -> None:
        import importlib.metadata

        try:
            self.version = importlib.metadata.version("binpacking")
            from binpacking import to_constant_volume
        except (importlib.metadata.PackageNotFoundError, ImportError) as error:
            raise RuntimeError(f"binpacking cannot be loaded ({error}); install "
                               f"binpacking=={EXPECTED_VERSION} (the `bins` extra)") from None
        self.to_constant_volume = to_constant_volume
        self.description = f"binpacking {self.version} to_constant_volume"

    def bin(self, lengths: Any, config: dict[str, Any]) -> Binned:
        _binning.refuse(config, "binpacking.to_constant_volume", {
            "algorithm": ("first_fit_decreasing",), "cost": ("tokens",),
            "overflow": ("reject", "drop"), "order": ("placement",), "min_bins": (1,),
            "bins_multiple_of": (1,)})
        capacity = config["capacity"]
        bound = capacity if config.get("overflow") == "drop" else None
        items = [(i, length) for i, length in enumerate(lengths.tolist()
                                                         if hasattr(lengths, "tolist")
                                                         else lengths)]
        bins = self.to_constant_volume(items, capacity, weight_pos=1, upper_bound=bound)
        return Binned(bins=[[item[0] for item in b] for b in bins])


TARGETS = (BinpackingToConstantVolume,)
