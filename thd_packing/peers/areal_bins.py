"""Binner targets over AReaL 1.0.4's `areal/utils/seqpack.py`, from its wheel.

The file is executed on its own with stubs for `numba` (its `njit` decorates only
`partition_balanced`, not judged here, and numba is not installed: the decorator becomes the
identity) and `areal.utils.logging` (a standard logger; `kk_allocate` logs its fallback).

- `ArealFFD`: `ffd_allocate(values, capacity, min_groups, n_groups_divisor)`, as AReaL's
  `allocate_balanced_mbs` calls it (`max_tokens_per_mb`, `n_mbs`, `n_mbs_divisor`). AReaL names
  it First Fit Decreasing (the section heading "FFD (First Fit Decreasing) Algorithm",
  `allocate_balanced_mbs`' docstring "First Fit Decreasing -- fast greedy heuristic"), so it is
  judged against R-BIN-11; its own docstring describes another rule: sorted descending, each
  value into the group "with the smallest size" (fewest items) among those it fits.
- `ArealKK`: `kk_allocate(values, capacity, min_groups, n_groups_divisor)`, "a drop-in
  replacement for ffd_allocate" that partitions "using the Karmarkar-Karp differencing method"
  into `max(min_groups, ceil(total / capacity))` groups: judged against R-BIN-15.

Both return the groups as they place them (`allocate_balanced_mbs` sorts them afterwards; the
adapter hands back `ffd_allocate`'s own output), so the bins list their pieces in placement
order. Not expressible: `cost="rows"`, overflow other than `reject`, `order="input"`.
`balanced_greedy_partition`, `reorder_to_balanced_batches` and `min_abs_diff_partition` take a
group count or a per-batch item count, no capacity: they split micro-batches over ranks, not
a bin step (listed in WIRING, not wired). Findings: docs/findings/bins-areal.md.
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _bins, _wheel
from ._wiring import fixed, not_wired, wired

EXPECTED_VERSION = "1.0.4"
PATH = "areal/utils/seqpack.py"
_HINT = "install areal==1.0.4 --no-deps"
_COUNTS = frozenset({"min_bins", "bins_multiple_of"})


def _identity(*args: Any, **kwargs: Any) -> Any:
    """Glue for `numba.njit`, bare or called with options."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn


def load_module() -> tuple[types.ModuleType, str]:
    """`seqpack.py` of the installed AReaL wheel, executed with stubs."""
    path, version = _wheel.locate("areal", PATH, _HINT)
    s = _wheel.stub_module
    log = s("areal.utils.logging", {"getLogger": lambda name: logging.getLogger(
        f"thd_packing.areal.{name}")})
    stubs = {"numba": s("numba", {"njit": _identity}),
             "areal": s("areal", package=True),
             "areal.utils": s("areal.utils", {"logging": log}, package=True),
             "areal.utils.logging": log}
    return _wheel.exec_file(path, "_thd_conformance_areal_seqpack", stubs), version


@functools.cache
def module() -> tuple[types.ModuleType, str]:
    """The loaded module, once per process."""
    return load_module()


class _Allocator:
    name = ""
    function = ""
    claims = ""
    declared_bins = BinDeclared()

    def __init__(self) -> None:
        self.module, self.version = module()
        self.allocate: Callable[..., Any] = getattr(self.module, self.function)

    def bin(self, lengths: np.ndarray, config: Mapping[str, Any]) -> Binned:
        c = _bins.read_config(config, target=self.name, algorithm=self.claims,
                              order="placement", counts=_COUNTS)
        groups = self.allocate([v.item() if hasattr(v, "item") else v for v in lengths],
                               c["capacity"], min_groups=c["min_bins"],
                               n_groups_divisor=c["bins_multiple_of"])
        return Binned(bins=groups)


class ArealFFD(_Allocator):
    """`ffd_allocate`."""

    name = "areal-ffd"
    function = "ffd_allocate"
    claims = "first_fit_decreasing"
    declared_bins = BinDeclared(algorithms=frozenset({"first_fit_decreasing"}), order="placement",
                                features=frozenset({"min_bins", "bins_multiple_of"}))


class ArealKK(_Allocator):
    """`kk_allocate` (equal_size=False, as `allocate_balanced_mbs` leaves it)."""

    name = "areal-kk"
    function = "kk_allocate"
    claims = "karmarkar_karp"
    declared_bins = BinDeclared(algorithms=frozenset({"karmarkar_karp"}), order="placement",
                                features=frozenset({"min_bins", "bins_multiple_of"}))


TARGETS = (ArealFFD, ArealKK)

_MOD = "areal.utils.seqpack"
_RANKS = not_wired("a group count (K ranks) and no capacity: a rank split (R-BIN-20), not a "
                   "bin step; the binner protocol has no rank partition")
WIRING = {
    f"{_MOD}.ffd_allocate": {
        "values": wired("lengths (a list of Python ints, as allocate_balanced_mbs passes)"),
        "capacity": wired("capacity"),
        "min_groups": wired("min_bins"),
        "n_groups_divisor": wired("bins_multiple_of"),
    },
    f"{_MOD}.kk_allocate": {
        "values": wired("lengths (a list of Python ints)"),
        "capacity": wired("capacity"),
        "min_groups": wired("min_bins"),
        "n_groups_divisor": wired("bins_multiple_of"),
        "equal_size": fixed("False: allocate_balanced_mbs never passes it (True keeps the same "
                            "item count per group, R-BIN-19's rank split)"),
    },
    f"{_MOD}.balanced_greedy_partition": {"nums": _RANKS, "K": _RANKS},
    f"{_MOD}.reorder_to_balanced_batches": {
        "seqlens": not_wired("batches of a fixed item count, no capacity: no BinConfig field"),
        "n_seqs_per_batch": not_wired("an item count per batch: no BinConfig field"),
    },
    f"{_MOD}.min_abs_diff_partition": {
        "arr": not_wired("contiguous runs in input order into k parts, no capacity"),
        "k": not_wired("a part count, no capacity"),
        "min_size": not_wired("an item count per part: no BinConfig field"),
    },
}
