"""axolotl 0.19's `MultipackBatchSampler` as binner targets (spec/bins.md), from its wheel.

`MultipackBatchSampler(sampler, batch_size, batch_max_len, lengths, bin_size, ...)` packs the
examples its sampler yields into bins of `batch_max_len` tokens: `pack_parallel` cuts them into
groups of `group_size` and `pack_group` (numba) places each in turn into the first bin with room
("First-Fit Decreasing" in its docstring), or, with `sequential=True`, `allocate_sequentially`
keeps one open bin. The bins are grouped `batch_size` to a batch, the last short batch dropped
under `drop_last`, and `__iter__` cuts the batches to the count `__len__` agreed on. The adapter
builds the sampler the way axolotl's trainer does (`_create_multipack_sampler`: `batch_size=1`,
`drop_last=True`, `len(sampler)` at once), over a `SequentialSampler` so that the examples come
in input order, and hands back the bins of every batch it yields, as yielded.

`samplers/multipack.py` is executed from the wheel under a private name (`axolotl.utils`
imports accelerate): `axolotl.utils.distributed` holds the wheel's own `reduce_and_broadcast`,
compiled from its file with `is_distributed` false (one process, no process group), and
`axolotl.utils.logging` a plain logger. numba compiles `pack_group` on the first call.
Findings: docs/findings/bins-axolotl.md.
"""

from __future__ import annotations

import logging
import types
from typing import Any

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _binning, _wheel
from ._wiring import Wiring, fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "0.19.0"
MULTIPACK = "axolotl/utils/samplers/multipack.py"
DISTRIBUTED = "axolotl/utils/distributed.py"
_HINT = f"install axolotl=={EXPECTED_VERSION} --no-deps and numba (the `bins` extra)"
BIN_SIZE = 200  # axolotl's sample_packing_bin_size default (utils/schemas/config.py)

SAMPLER = "axolotl.utils.samplers.multipack.MultipackBatchSampler"
WIRING: Wiring = {
    SAMPLER: {
        "sampler": not_wired("the order the examples are binned in: a SequentialSampler here "
                             "(curriculum_sampling's), so the lengths are binned in input "
                             "order; the default RandomSampler draws an order, and with it "
                             "__iter__'s cut to __len__'s count loses examples (pinned in "
                             "tests/peers/test_axolotl_bins.py; no config field draws an "
                             "order)"),
        "batch_size": fixed("1, the trainer's value unless multipack_real_batches: one bin "
                            "per batch"),
        "batch_max_len": wired("capacity"),
        "lengths": wired("lengths"),
        "bin_size": fixed(f"{BIN_SIZE}, sample_packing_bin_size's default: at most that many "
                          "examples per bin (the targets take at most that many examples, "
                          "max_items, so it never binds)"),
        "packing_efficiency_estimate": no_effect("stored; not read by the packing"),
        "drop_last": fixed("True, what both of axolotl's callers pass (with batch_size=1 no "
                           "batch is short)"),
        "num_count_samples": fixed("4, the default: __len__ packs 4 times and keeps the "
                                   "fewest batches; with a sequential sampler every pass is "
                                   "the same"),
        "sequential": wired("the target: axolotl-multipack (False), axolotl-sequential "
                            "(True)"),
        "group_size": not_wired("cuts the examples into groups of group_size, each binned on "
                                "its own; no config field names it: 100,000, the default, "
                                "above any draw"),
        "num_processes": no_effect("the groups are packed in that many processes and "
                                   "concatenated in order: the same bins"),
        "safe_mode": no_effect("skips an example that would open a bin past max_bins = the "
                               "group's size, which first fit never reaches"),
        "mp_start_method": no_effect("how worker processes start"),
        "kwargs": no_effect("not read"),
    },
    "axolotl.utils.samplers.multipack.pack_group": {
        "sequence_lengths": wired("lengths, through the sampler"),
        "group_offset": fixed("0, one group (pack_parallel)"),
        "bin_capacity": wired("capacity, through the sampler's batch_max_len"),
        "max_bins": fixed("the group's size (pack_parallel)"),
        "bin_size": fixed(f"{BIN_SIZE}, through the sampler"),
        "safe_mode": no_effect("see the sampler's safe_mode"),
    },
    "axolotl.utils.samplers.multipack.allocate_sequentially": {
        "sequence_lengths": wired("lengths, through the sampler (sequential=True)"),
        "rank": fixed("0, what the sampler passes"),
        "bin_capacity": wired("capacity, through the sampler's batch_max_len"),
        "num_ranks": fixed("1, what the sampler passes"),
    },
}


def _load() -> tuple[Any, Any, str]:
    """The wheel's MultipackBatchSampler and its module, and axolotl's version."""
    path, version = _wheel.locate("axolotl", MULTIPACK, _HINT)
    dist_path, _ = _wheel.locate("axolotl", DISTRIBUTED, _HINT)
    s = _wheel.stub_module
    reduce_and_broadcast = _wheel.load_function(dist_path, "reduce_and_broadcast", {
        "is_distributed": lambda: False})
    module = _wheel.exec_file(path, "_thd_conformance_axolotl_multipack", {
        "axolotl": s("axolotl", package=True),
        "axolotl.utils": s("axolotl.utils", package=True),
        "axolotl.utils.distributed": s("axolotl.utils.distributed", {
            "reduce_and_broadcast": reduce_and_broadcast}),
        "axolotl.utils.logging": s("axolotl.utils.logging", {"get_logger": logging.getLogger}),
    })
    # generate_batches ends with gc.collect(), which frees memory and changes no bin; in a
    # process holding torch it costs a quarter of a second, five times a call (len, then iter)
    module.__dict__["gc"] = types.SimpleNamespace(collect=lambda: 0)
    return module.MultipackBatchSampler, module, version


class _AxolotlMultipack:
    sequential = False
    name = ""
    declared_bins = BinDeclared()
    supported: dict[str, tuple[Any, ...]] = {}

    def __init__(self) -> None:
        from torch.utils.data import SequentialSampler

        self.sampler_class, self.module, self.version = _load()
        self.sequential_sampler = SequentialSampler
        self.description = (f"axolotl {self.version} MultipackBatchSampler(sequential="
                            f"{self.sequential})")

    def bin(self, lengths: Any, config: dict[str, Any]) -> Binned:
        _binning.refuse(config, f"axolotl {self.name}", self.supported)
        sampler = self.sampler_class(
            self.sequential_sampler(range(len(lengths))), batch_size=1,
            batch_max_len=config["capacity"], lengths=lengths, bin_size=BIN_SIZE,
            drop_last=True, sequential=self.sequential)
        len(sampler)  # as _create_multipack_sampler does: the batch count, agreed once
        return Binned(bins=[b for batch in sampler for b in batch])


class AxolotlMultipack(_AxolotlMultipack):
    """sequential=False. pack_group's docstring: "Pack a group of sequences into bins using
    First-Fit Decreasing algorithm"; the class's: "parallel packing (using FFD algorithm)"."""

    sequential = False
    name = "axolotl-multipack"
    declared_bins = BinDeclared(
        algorithms=frozenset({"first_fit_decreasing"}), overflow=frozenset({"reject"}),
        order="placement",
        features=frozenset(), max_items=BIN_SIZE,
        notes={"overflow": "no policy of its own: its one behaviour is judged as the spec's "
                           "default, reject"})
    supported = {"algorithm": ("first_fit_decreasing",), "cost": ("tokens",),
                 "overflow": ("reject",), "order": ("placement",), "min_bins": (1,),
                 "bins_multiple_of": (1,)}


class AxolotlSequential(_AxolotlMultipack):
    """sequential=True. allocate_sequentially's docstring: "Sequential allocator that preserves
    example order": R-BIN-13's next fit."""

    sequential = True
    name = "axolotl-sequential"
    declared_bins = BinDeclared(
        algorithms=frozenset({"sequential"}), overflow=frozenset({"reject"}),
        order="input",
        features=frozenset(), max_items=BIN_SIZE,
        notes=AxolotlMultipack.declared_bins.notes)
    supported = {"algorithm": ("sequential",), "cost": ("tokens",), "overflow": ("reject",),
                 "order": ("input", "placement"), "min_bins": (1,), "bins_multiple_of": (1,)}


TARGETS = (AxolotlMultipack, AxolotlSequential)
