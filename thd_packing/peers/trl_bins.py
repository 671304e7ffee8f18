"""TRL 1.16's `trl.data_utils.pack_dataset` as binner targets (spec/bins.md), from its wheel.

One target per `strategy`, since each claims its own algorithm: "bfd" (best fit decreasing,
overlong examples truncated), "bfd_split" (the same, overlong examples split into
`seq_length` fragments first) and "wrapped" (concatenate, cut every `seq_length`). Each call
builds a real `datasets.Dataset` with one `input_ids` column whose token values name their
example and offset (`_binning.token_ids`), runs `pack_dataset`, and reads the bins back off the
packed rows: one bin per row, its pieces where the token values stop running on or where the
row's `seq_lengths` (bfd) says a segment ends. Nothing is sorted or repaired.
Findings: docs/findings/bins-trl.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _binning
from ._wiring import Wiring, not_wired, wired

EXPECTED_VERSION = "1.16.0"
ENTRY = "trl.data_utils.pack_dataset"
_HINT = (f"install trl=={EXPECTED_VERSION} --no-deps with datasets and pyarrow "
         "(the `bins` extra)")

WIRING: Wiring = {
    ENTRY: {
        "dataset": wired("lengths: a datasets.Dataset of input_ids, one row per example, "
                         "whose token values name example and offset"),
        "seq_length": wired("capacity"),
        "strategy": wired("the target: trl-bfd (best_fit_decreasing, overflow truncate), "
                          "trl-bfd-split (best_fit_decreasing, overflow split), trl-wrapped "
                          "(wrapped, overflow split)"),
        "map_kwargs": not_wired("Dataset.map's batch_size (1000 by default) bins each batch of "
                                "1000 examples on its own; no config field names a batch, so "
                                "the targets take at most 1000 examples (max_items) and pass "
                                "None, as SFTTrainer does"),
    },
    "trl.data_utils._pack_bfd": {
        "examples": wired("lengths, through pack_dataset's dataset (one Arrow batch)"),
        "seq_length": wired("capacity, through pack_dataset"),
        "on_seq_length_overflow": wired("overflow: 'truncate' (strategy bfd), 'split' "
                                        "(strategy bfd_split)"),
    },
    "trl.data_utils._pack_wrapped": {
        "examples": wired("lengths, through pack_dataset's dataset (one Arrow batch)"),
        "seq_length": wired("capacity, through pack_dataset"),
    },
}


def _load() -> tuple[Any, Any, str]:
    """pack_dataset, a function building the input Dataset, and trl's version."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("trl")
        import datasets
        from trl.data_utils import pack_dataset
    except (importlib.metadata.PackageNotFoundError, ImportError) as error:
        raise RuntimeError(f"trl's pack_dataset cannot be loaded ({error}); {_HINT}") from None
    datasets.disable_progress_bars()  # no effect on the result: the map's progress bar only
    features = datasets.Features({"input_ids": datasets.List(datasets.Value("int64"))})

    def build(lengths: np.ndarray) -> Any:
        return datasets.Dataset.from_dict({"input_ids": _binning.token_ids(lengths)},
                                          features=features)

    return pack_dataset, build, version


class _TrlPackDataset:
    """`pack_dataset(dataset, seq_length=capacity, strategy=STRATEGY)`, bins read off its rows."""

    strategy = ""
    name = ""
    declared_bins = BinDeclared()
    supported: dict[str, tuple[Any, ...]] = {}

    def __init__(self) -> None:
        self.pack_dataset, self.build, self.version = _load()
        self.description = f"trl {self.version} pack_dataset(strategy={self.strategy!r})"

    def bin(self, lengths: Any, config: dict[str, Any]) -> Binned:
        _binning.refuse(config, f"trl pack_dataset(strategy={self.strategy!r})", self.supported)
        packed = self.pack_dataset(self.build(np.asarray(lengths)), config["capacity"],
                                   strategy=self.strategy)
        rows = packed["input_ids"]
        cuts = (packed["seq_lengths"] if "seq_lengths" in packed.column_names
                else [None] * len(rows))
        return Binned(bins=[_binning.pieces_of(row, cut) for row, cut in zip(rows, cuts,
                                                                               strict=True)])


class TrlBfd(_TrlPackDataset):
    """strategy="bfd". Its docstring: "Best Fit Decreasing: Preserves sequence boundaries and
    truncates sequences that exceed `seq_length`, discarding overflow tokens"; `_pack_bfd`'s:
    "Pack sequences in a pyarrow Table using Best Fit Decreasing strategy". Bins list their
    examples in the order they were placed."""

    strategy = "bfd"
    name = "trl-bfd"
    declared_bins = BinDeclared(
        algorithms=frozenset({"best_fit_decreasing"}), overflow=frozenset({"truncate"}),
        order="placement",
        features=frozenset(), validated_elsewhere=frozenset({"lengths"}),
        max_items=1000,
        notes={"lengths": "a dataset of token lists cannot hold a negative or fractional "
                          "length, so R-BIN-1's rejections are out of its reach"})
    supported = {"algorithm": ("best_fit_decreasing",), "cost": ("tokens",),
                 "overflow": ("truncate",), "order": ("placement",), "min_bins": (1,),
                 "bins_multiple_of": (1,)}


class TrlBfdSplit(_TrlPackDataset):
    """strategy="bfd_split". Its docstring: "Similar to `bfd` but splits overflow sequences for
    packing into other examples. Prevents token loss": best fit decreasing over the pieces."""

    strategy = "bfd_split"
    name = "trl-bfd-split"
    declared_bins = BinDeclared(
        algorithms=frozenset({"best_fit_decreasing"}), overflow=frozenset({"split"}),
        order="placement",
        features=frozenset(), validated_elsewhere=frozenset({"lengths"}),
        max_items=1000, notes=TrlBfd.declared_bins.notes)
    supported = {"algorithm": ("best_fit_decreasing",), "cost": ("tokens",),
                 "overflow": ("split",), "order": ("placement",), "min_bins": (1,),
                 "bins_multiple_of": (1,)}


class TrlWrapped(_TrlPackDataset):
    """strategy="wrapped". Its docstring: "Ignores sequence boundaries and will cut sequences in
    the middle to completely fill each packed sequence with data": R-BIN-14's `wrapped`, whose
    pieces are in input order (placement order is the same)."""

    strategy = "wrapped"
    name = "trl-wrapped"
    declared_bins = BinDeclared(
        algorithms=frozenset({"wrapped"}), overflow=frozenset({"split"}),
        order="input",
        features=frozenset(), validated_elsewhere=frozenset({"lengths"}),
        max_items=1000, notes=TrlBfd.declared_bins.notes)
    supported = {"algorithm": ("wrapped",), "cost": ("tokens",), "overflow": ("split",),
                 "order": ("input", "placement"), "min_bins": (1,), "bins_multiple_of": (1,)}


TARGETS = (TrlBfd, TrlBfdSplit, TrlWrapped)
