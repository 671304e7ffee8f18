"""ms-swift 4.6's packing (`swift/dataset/packing.py`) as binner targets (spec/bins.md).

`PackingDataset(template, dataset, packing_length=..., packing_strategy=...)` bins the
dataset's `lengths` column when it is built: one worker process per `packing_num_proc` runs
`create_packed_idx` over batches of 1,000 examples, carrying the last bin of each batch over to
the next, through `calculate_matched_group`, which calls `binpacking.to_constant_volume`
(strategy "binpack", the default) or a next-fit loop (strategy "sequential"). The bins are
`packed_idx`, lists of example indices, handed back as they are.

The file is executed from the wheel under a private name (the `swift` package imports
modelscope and a training stack): `swift.template` is a stub holding `MaxLengthError`, and
`swift.utils` holds the wheel's own `split_list`, `is_master`, `is_dist` and
`get_dist_setting`, compiled from `swift/utils/{utils,env}.py`. Findings:
docs/findings/bins-ms-swift.md.
"""

from __future__ import annotations

import functools
import logging
import os
import types
from typing import Any, TypeVar

import numpy as np

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _binning, _wheel
from ._wiring import Wiring, fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "4.6.0"
PACKING = "swift/dataset/packing.py"
UTILS = "swift/utils/utils.py"
ENV = "swift/utils/env.py"
_HINT = (f"install ms-swift=={EXPECTED_VERSION} --no-deps and binpacking==2.0.1 "
         "(the `bins` extra)")

WIRING: Wiring = {
    "swift.dataset.packing.PackingDataset": {
        "template": wired("template.max_length = capacity (the packing length when "
                          "packing_length is None, ms-swift's default); its packing and "
                          "padding_free flags are set by the class and not read here"),
        "dataset": wired("dataset.lengths: the lengths, one per example (only that column "
                         "and len() are read)"),
        "num_proc": no_effect("kept for the encoding step; not read by the packing"),
        "strict": no_effect("stored; not read by the packing"),
        "load_from_cache_file": no_effect("stored; not read by the packing"),
        "packing_length": wired("capacity"),
        "packing_num_proc": not_wired("cuts the lengths into that many contiguous chunks, "
                                      "each binned on its own (a pass per worker); no config "
                                      "field names it: 1, the default"),
        "packing_strategy": wired("the target: ms-swift-binpack ('binpack', the default), "
                                  "ms-swift-sequential ('sequential')"),
        "multiprocessing_context": no_effect("how the worker process starts"),
        "kwargs": no_effect("not read"),
    },
    "swift.dataset.packing.PackingDataset.create_packed_idx": {
        "rank": fixed("0: the worker's number, one worker (packing_num_proc=1)"),
        "offset": fixed("0: the first index of the worker's chunk, one chunk"),
        "lengths": wired("lengths, through PackingDataset"),
        "out_queue": no_effect("the queue the bins travel back on"),
        "packing_length": wired("capacity, through PackingDataset"),
        "packing_strategy": wired("the target, through PackingDataset"),
    },
    "swift.dataset.packing.calculate_matched_group": {
        "sequences": wired("lengths as (index, length), in batches of PACKING_BATCH_SIZE = "
                           "1000, through create_packed_idx"),
        "packing_length": wired("capacity, through create_packed_idx"),
        "is_finished": wired("False for every batch but the last (its last bin is carried "
                             "into the next batch), driven by the number of lengths"),
        "strategy": wired("the target, through create_packed_idx"),
    },
}


def _load() -> tuple[Any, str]:
    """The wheel's PackingDataset class, and ms-swift's version."""
    path, version = _wheel.locate("ms-swift", PACKING, _HINT)
    utils_path, _ = _wheel.locate("ms-swift", UTILS, _HINT)
    env_path, _ = _wheel.locate("ms-swift", ENV, _HINT)
    envns: dict[str, Any] = {"os": os, "tuple": tuple}
    for name in ("get_dist_setting", "is_master", "is_dist"):
        _wheel.load_function(env_path, name, envns)
    split_list = _wheel.load_function(utils_path, "split_list", {
        "np": np, "List": list, "_T": TypeVar("_T")})
    s = _wheel.stub_module
    module = _wheel.exec_file(path, "_thd_conformance_swift_packing", {
        "swift": s("swift", package=True),
        "swift.template": s("swift.template", {"MaxLengthError": type(
            "MaxLengthError", (ValueError,), {})}),
        "swift.utils": s("swift.utils", {
            "split_list": split_list, "is_master": envns["is_master"],
            "is_dist": envns["is_dist"], "get_logger": lambda: logging.getLogger("swift")},
            callables=("get_external_files", "import_external_file")),
    })
    # the progress bar only (no effect on the bins): off, so the suite's output stays readable
    module.__dict__["tqdm"] = functools.partial(module.__dict__["tqdm"], disable=True)
    return module.PackingDataset, version


class _Lengths:
    """The dataset as PackingDataset reads it: `dataset['lengths']` and `len(dataset)`."""

    def __init__(self, lengths: list[Any]) -> None:
        self.lengths = lengths

    def __getitem__(self, key: str) -> list[Any]:
        if key != "lengths":
            raise KeyError(key)
        return self.lengths

    def __len__(self) -> int:
        return len(self.lengths)


class _MsSwiftPacking:
    strategy = ""
    name = ""
    declared_bins = BinDeclared()
    supported: dict[str, tuple[Any, ...]] = {}

    def __init__(self) -> None:
        self.packing_dataset, self.version = _load()
        self.description = (f"ms-swift {self.version} PackingDataset(packing_strategy="
                            f"{self.strategy!r})")

    def bin(self, lengths: Any, config: dict[str, Any]) -> Binned:
        _binning.refuse(config, f"ms-swift PackingDataset({self.strategy!r})", self.supported)
        values = lengths.tolist() if hasattr(lengths, "tolist") else list(lengths)
        capacity = config["capacity"]
        template = types.SimpleNamespace(max_length=capacity)
        packed = self.packing_dataset(template, _Lengths(values), packing_length=capacity,
                                      packing_strategy=self.strategy)
        return Binned(bins=packed.packed_idx)


class MsSwiftBinpack(_MsSwiftPacking):
    """packing_strategy="binpack". ms-swift's comment on it: "default: best-fit-decreasing bin
    packing (https://arxiv.org/pdf/2404.10830)", so it claims best fit decreasing; the call is
    `binpacking.to_constant_volume`, whose loop picks the emptiest bin that fits."""

    strategy = "binpack"
    name = "ms-swift-binpack"
    declared_bins = BinDeclared(
        algorithms=frozenset({"best_fit_decreasing"}), overflow=frozenset({"reject"}),
        order="placement",
        features=frozenset(),
        notes={"overflow": "no policy of its own: its one behaviour is judged as the spec's "
                           "default, reject"})
    supported = {"algorithm": ("best_fit_decreasing",), "cost": ("tokens",),
                 "overflow": ("reject",), "order": ("placement",), "min_bins": (1,),
                 "bins_multiple_of": (1,)}


class MsSwiftSequential(_MsSwiftPacking):
    """packing_strategy="sequential". Its comment: "Order-preserving greedy packing (next-fit):
    keep a single open pack and flush it when the next sample doesn't fit": R-BIN-13."""

    strategy = "sequential"
    name = "ms-swift-sequential"
    declared_bins = BinDeclared(
        algorithms=frozenset({"sequential"}), overflow=frozenset({"reject"}),
        order="input",
        features=frozenset(), notes=MsSwiftBinpack.declared_bins.notes)
    supported = {"algorithm": ("sequential",), "cost": ("tokens",), "overflow": ("reject",),
                 "order": ("input", "placement"), "min_bins": (1,), "bins_multiple_of": (1,)}


TARGETS = (MsSwiftBinpack, MsSwiftSequential)
