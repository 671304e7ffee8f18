"""Binner targets over torchtune 0.6.1's `PackedDataset`, from its wheel.

`thd_packing.peers.torchtune.load_packed_module` executes `torchtune/datasets/_packed.py` on its
own (a quiet stand-in for tqdm). Each example `i` of length `L_i` becomes a sample whose
`tokens` and `labels` are `L_i` ids unique in the whole dataset (the running token count plus
1, so none is the padding index 0); the packs `PackedDataset` builds are read back into pieces:
each pack's real positions (labels other than -100) are runs of consecutive ids of one
example, `(example, start, length)`.

- `TorchtuneSequential`: `split_across_pack=False`. The docstring: "greedy sample packing",
  samples added to a buffer in dataset order and the pack closed when the next sample does not
  fit, the sample moved "entirely to the beginning of the next pack": next fit, R-BIN-13
  (`sequential`); an example over `max_seq_len` is a ValueError (R-BIN-6).
- `TorchtuneWrapped`: `split_across_pack=True`: "split the sample into the next pack": the
  buffer cut every `max_seq_len` tokens, R-BIN-14 (`wrapped`, overflow `split`).

Not expressible: `cost="rows"` (`max_seq_len` counts tokens), `min_bins` and
`bins_multiple_of` (one open pack), examples of length 0 (no token to read back: not declared),
lengths that are not token counts (a sample's length is `len(tokens)`: declared validated
elsewhere, refused by the glue), and `max_packs`, which stops packing after that many packs
and drops the rest of the dataset (no BinConfig field; R-BIN-18 would call the dropped
examples lost). Findings: docs/findings/bins-torchtune.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _bins
from ._wiring import no_effect, not_wired, wired
from .torchtune import load_packed_module

IGNORE = -100  # torchtune's CROSS_ENTROPY_IGNORE_IDX: the labels of padding


def samples(lengths: Any) -> tuple[list[dict[str, list[int]]], list[int]]:
    """One sample per example, its tokens and labels the ids `offset + 1 .. offset + L`, and
    the offset of each example (where its ids start, less one)."""
    out, offsets, offset = [], [], 0
    for length in _bins.token_counts(lengths):
        ids = list(range(offset + 1, offset + 1 + int(length)))
        out.append({"tokens": ids, "labels": list(ids)})
        offsets.append(offset)
        offset += int(length)
    return out, offsets


def read_pack(pack: Mapping[str, Any], offsets: list[int]) -> list[tuple[int, int, int]]:
    """A pack's real positions as pieces: runs of consecutive ids of one example."""
    labels = [int(v) for v in pack["labels"]]
    ids = [int(t) for t, label in zip(pack["tokens"], labels, strict=True) if label != IGNORE]
    pieces: list[list[int]] = []  # [example, start, length]
    for token in ids:
        example = int(np.searchsorted(offsets, token - 1, side="right")) - 1
        start = token - 1 - offsets[example]
        last = pieces[-1] if pieces else None
        if last is not None and last[0] == example and last[1] + last[2] == start:
            last[2] += 1
        else:
            pieces.append([example, start, 1])
    return [(e, s, n) for e, s, n in pieces]


class _Packed:
    name = ""
    split = False
    claims = ""
    overflow: frozenset[str] = frozenset({"reject"})
    declared_bins = BinDeclared()

    def __init__(self) -> None:
        self.module, self.version = load_packed_module()

    def bin(self, lengths: np.ndarray, config: Mapping[str, Any]) -> Binned:
        c = _bins.read_config(config, target=self.name, algorithm=self.claims, order="input",
                              overflow=self.overflow)
        ds, offsets = samples(lengths)
        packed = self.module.PackedDataset(ds, max_seq_len=c["capacity"], padding_idx=0,
                                           max_packs=None, split_across_pack=self.split)
        return Binned(bins=[read_pack(pack, offsets) for pack in packed.packs])


class TorchtuneSequential(_Packed):
    """`PackedDataset(ds, max_seq_len=capacity, split_across_pack=False)`."""

    name = "torchtune-sequential"
    claims = "sequential"
    declared_bins = BinDeclared(algorithms=frozenset({"sequential"}), order="input",
                                lacks=frozenset({"zero_length"}),
                                validated_elsewhere=frozenset({"lengths"}))


class TorchtuneWrapped(_Packed):
    """`PackedDataset(ds, max_seq_len=capacity, split_across_pack=True)`."""

    name = "torchtune-wrapped"
    split = True
    claims = "wrapped"
    overflow = frozenset({"split"})
    declared_bins = BinDeclared(algorithms=frozenset({"wrapped"}), overflow=frozenset({"split"}),
                                order="input", lacks=frozenset({"zero_length"}),
                                validated_elsewhere=frozenset({"lengths"}))


TARGETS = (TorchtuneSequential, TorchtuneWrapped)

WIRING = {
    "torchtune.datasets._packed.PackedDataset": {
        "ds": wired("lengths: one sample of unique token ids per example"),
        "max_seq_len": wired("capacity"),
        "padding_idx": no_effect("the pad token's value; the pieces are read from the labels"),
        "max_packs": not_wired("stops after that many packs and drops the rest of the dataset: "
                               "no BinConfig field caps the bin count (R-BIN-18 would call "
                               "the dropped examples lost)"),
        "split_across_pack": wired("algorithm: False is sequential (overflow reject), True "
                                   "is wrapped (overflow split)"),
    },
}
