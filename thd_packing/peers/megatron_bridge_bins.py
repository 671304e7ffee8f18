"""Binner targets over Megatron-Bridge 0.3.1's packed-SFT preparation, from its wheel.

`megatron/bridge/data/datasets/packing_utils.py` is executed on its own (it imports numpy,
tqdm and the standard library only; a quiet stand-in replaces tqdm). The path is the one
`prepare_packed_sequence_data` takes after tokenizing: `create_hist(dataset, max_seq_length)`
buckets the examples by length, `create_packing_strategy(histogram, packed_sequence_size,
packing_algorithm)` bins the lengths, and `fill_packing_strategy(assignments, sequences,
packed_sequence_size, pad_id)` draws, for each length in a bin, an example of that length.
Example `i` of length `L_i` becomes `input_ids` of `L_i + 1` ids unique in the dataset:
Megatron-Bridge bins `len(input_ids) - 1` tokens, the model's input once the collate drops
each sequence's last token. Each packed row is read back through its `seq_start_id` into
pieces `(example, 0, L)`. `max_seq_length` is the capacity too, as Megatron-Bridge's recipes
set it (`packed_sequence_size=seq_length`).

- `MegatronBridgeFFD`: `packing_algorithm="first_fit_decreasing"`, which claims First-Fit
  Decreasing ("the sequences are sorted by decreasing length before packing"): R-BIN-11.
- `MegatronBridgeFirstFitShuffle`: `"first_fit_shuffle"`, `prepare_packed_sequence_data`'s
  default ("First-Fit with Shuffling"): no spec algorithm (first fit over a random order).
- `MegatronBridgeFirstFit`: `"first_fit"`, `create_packing_strategy`'s own default; its
  docstring claims First-Fit, but the lengths reach it from the histogram in increasing order,
  so it is first fit increasing, no spec algorithm.

All three draw from numpy's global random state (the shuffle, and which of several examples of
one length fills which bin), so the same input can give other bins (R-BIN-18); the adapter
does not seed it. Not expressible: `cost="rows"` (`pad_seq_to_mult` pads each example to a
multiple before binning, R-BIN-4's rows, only through the tokenizer path), overflow other than
`reject`, `min_bins`, `bins_multiple_of`. Findings: docs/findings/bins-megatron-bridge.md.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _bins, _wheel
from ._wiring import fixed, no_effect, not_wired, wired

DIST = "megatron-bridge"
PATH = "megatron/bridge/data/datasets/packing_utils.py"
_HINT = "install megatron-bridge==0.3.1 --no-deps"
PAD_ID = 0  # ids start at 1, so none is the pad id


def _quiet(iterable: Iterable[Any], *args: Any, **kwargs: Any) -> Iterable[Any]:
    """Glue for tqdm: the iterable itself."""
    return iterable


def load_module() -> tuple[types.ModuleType, str]:
    """`packing_utils.py` of the installed Megatron-Bridge wheel, executed with a quiet tqdm."""
    path, version = _wheel.locate(DIST, PATH, _HINT)
    stubs = {"tqdm": _wheel.stub_module("tqdm", {"tqdm": _quiet})}
    return _wheel.exec_file(path, "_thd_conformance_bridge_packing_utils", stubs), version


@functools.cache
def module() -> tuple[types.ModuleType, str]:
    """The loaded module, once per process."""
    return load_module()


def dataset(lengths: Any) -> tuple[np.ndarray, list[int]]:
    """The tokenized dataset `create_hist` reads (an object array of dicts, as
    `tokenize_dataset` returns it): example `i` has `L_i + 1` unique ids; and where each
    example's ids start, less one."""
    items, offsets, offset = [], [], 0
    for length in _bins.token_counts(lengths):
        ids = list(range(offset + 1, offset + int(length) + 2))
        items.append({"input_ids": ids, "loss_mask": [True] * len(ids)})
        offsets.append(offset)
        offset += int(length) + 1
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array, offsets


def read_row(row: Mapping[str, Any], offsets: list[int]) -> list[tuple[int, int, int]]:
    """A packed row's sequences as pieces `(example, 0, tokens - 1)`, each named by its first
    id."""
    ids = list(row["input_ids"])
    bounds = [*row["seq_start_id"], len(ids)]
    pieces = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        example = int(np.searchsorted(offsets, ids[start] - 1, side="right")) - 1
        pieces.append((example, 0, end - start - 1))
    return pieces


class _Strategy:
    name = ""
    algorithm = ""
    claims: str | None = None
    declared_bins = BinDeclared()

    def __init__(self) -> None:
        self.module, self.version = module()

    def bin(self, lengths: np.ndarray, config: Mapping[str, Any]) -> Binned:
        c = _bins.read_config(config, target=self.name, algorithm=self.claims,
                              order="placement")
        data, offsets = dataset(lengths)
        sequences, histogram = self.module.create_hist(data, c["capacity"])
        assignments, _ = self.module.create_packing_strategy(histogram, c["capacity"],
                                                             self.algorithm)
        rows = self.module.fill_packing_strategy(assignments, sequences, c["capacity"], PAD_ID)
        return Binned(bins=[read_row(row, offsets) for row in rows])


_FEATURES: frozenset[str] = frozenset()
_LENGTHS = frozenset({"lengths"})


class MegatronBridgeFFD(_Strategy):
    """`create_packing_strategy(..., "first_fit_decreasing")` and its neighbours."""

    name = "megatron-bridge-ffd"
    algorithm = "first_fit_decreasing"
    claims = "first_fit_decreasing"
    declared_bins = BinDeclared(algorithms=frozenset({"first_fit_decreasing"}), order="placement",
                                features=_FEATURES, validated_elsewhere=_LENGTHS)


class MegatronBridgeFirstFitShuffle(_Strategy):
    """`create_packing_strategy(..., "first_fit_shuffle")`."""

    name = "megatron-bridge-first-fit-shuffle"
    algorithm = "first_fit_shuffle"
    declared_bins = BinDeclared(order="placement", features=_FEATURES,
                                validated_elsewhere=_LENGTHS)


class MegatronBridgeFirstFit(_Strategy):
    """`create_packing_strategy(..., "first_fit")`: over the histogram's increasing lengths."""

    name = "megatron-bridge-first-fit"
    algorithm = "first_fit"
    declared_bins = BinDeclared(order="placement", features=_FEATURES,
                                validated_elsewhere=_LENGTHS)


TARGETS = (MegatronBridgeFFD, MegatronBridgeFirstFitShuffle, MegatronBridgeFirstFit)

_MOD = "megatron.bridge.data.datasets.packing_utils"
_SIZE = wired("capacity")
_ALGO = wired("the target: first_fit_decreasing, first_fit_shuffle, first_fit")
_SEQLENS = wired("lengths, through create_packing_strategy (the histogram's increasing order)")
WIRING = {
    f"{_MOD}.create_hist": {
        "dataset": wired("lengths: one example of L + 1 unique input_ids each"),
        "truncate_seq_len": fixed("capacity: the caller's max_seq_length, which "
                                  "Megatron-Bridge's recipes set to packed_sequence_size"),
    },
    f"{_MOD}.create_packing_strategy": {
        "histogram": wired("lengths, through create_hist"),
        "pack_size": _SIZE,
        "packing_algorithm": _ALGO,
    },
    f"{_MOD}.fill_packing_strategy": {
        "assignments": wired("the strategy's bins"),
        "sequences": wired("lengths, through create_hist"),
        "pack_size": wired("capacity (the lengths it looks up: 0 .. pack_size)"),
        "pad_id": no_effect("not read by the function's body"),
    },
    f"{_MOD}.first_fit": {"seqlens": _SEQLENS, "pack_size": _SIZE},
    f"{_MOD}.first_fit_decreasing": {"seqlens": _SEQLENS, "pack_size": _SIZE},
    f"{_MOD}.first_fit_shuffle": {"seqlens": _SEQLENS, "pack_size": _SIZE},
    "megatron.bridge.data.datasets.packed_sequence.prepare_packed_sequence_data": {
        "input_path": not_wired("a JSONL file tokenized by a MegatronTokenizer: the adapter "
                                "starts from the tokenized dataset (create_hist's input)"),
        "output_path": no_effect("where the packed rows are saved"),
        "output_metadata_path": no_effect("where the packing metadata is saved"),
        "packed_sequence_size": wired("capacity (create_packing_strategy's pack_size)"),
        "tokenizer": not_wired("tokenizes the file and supplies pad and eos ids: the adapter "
                               "starts from token ids"),
        "max_seq_length": fixed("capacity (create_hist's truncate_seq_len; the tokenizer "
                                "truncates to it)"),
        "seed": not_wired("seeds the SFT dataset's shuffle only; the packing draws from numpy's "
                          "global state (R-BIN-18)"),
        "packing_algorithm": _ALGO,
        "dataset_kwargs": no_effect("chat templates and tool schemas of the tokenizer path"),
        "pad_seq_to_mult": not_wired("pads each example to a multiple before binning: "
                                     "R-BIN-4's rows (cost='rows'), reached only through the "
                                     "tokenizer path"),
    },
}
