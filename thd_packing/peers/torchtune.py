"""The `torchtune` target: torchtune 0.6.1's `PackedDataset`, from its wheel.

`torchtune/datasets/_packed.py` from the wheel, executed on its own: `PackedDataset(ds,
max_seq_len=N, padding_idx=0)`, the labels shifted as torchtune's recipes do. One batch is one
pack: `fixed_total` = N (without it, the batch's own total); `cu_seqlens_padded` is the cumsum of
`seq_lens`, the padding its own last entry (`tail="segment"`). One rank.
Mapping, verdict and findings: docs/findings/torchtune.md.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from thd_packing.conformance.protocol import Config, Declared, Packed

from . import _tokens, _wheel
from ._wiring import not_wired, wired

EXPECTED_VERSION = "0.6.1"
PACKED_PATH = "torchtune/datasets/_packed.py"
COMMON_PATH = "torchtune/data/_common.py"
_HINT = (f"`nox -s conformance -- --target torchtune` installs torchtune=={EXPECTED_VERSION} "
         "--no-deps")
_PAD_VALUE = not_wired(
    "pad_value: the pad token's row; declaring pad_value turns on the pad-value rejection tests "
    "(R-ERR-1/10), which validated_elsewhere cannot decline for a token-id packer; needs that "
    "decline")
_LABELS_IN = not_wired("prebuilt labels (a prompt mask): the protocol hands no caller labels in; "
                       "needs an input-labels rule (R-LABEL)")
_BIN = "the bin step: no protocol key yet; needs the spec's bin rules in the protocol"
WIRING = {
    "torchtune.datasets._packed.PackedDataset": {
        "ds.tokens": wired("seqs (one sample per sequence)"),
        "ds.labels": wired("need_roll: the tokens as labels; a prompt mask is not drawn"),
        "max_seq_len": wired("fixed_total (the batch's own total without it)"),
        "padding_idx": _PAD_VALUE,
        "max_packs": not_wired(_BIN + " (the dataset stops after max_packs packs)"),
        "split_across_pack": not_wired(
            "a sample split over two packs: the spec rejects a batch over fixed_total "
            "(R-ERR-15); splitting needs a bin rule"),
    },
    "torchtune.data._collate.padded_collate_packed": {
        "batch": not_wired("the packs stacked into a batch with a block-causal mask from "
                           "seq_lens: a [P, S] batch of packs, which the protocol (one pack) "
                           "has no form for; needs a multi-pack batch form"),
    },
    "torchtune.modules.attention_utils.packed_block_causal_mask": {
        "seq_lens": not_wired("the attention mask from seq_lens: the protocol takes "
                              "metadata, not masks; needs a mask rule (R-CONSUMER)"),
    },
}


class _QuietBar:
    """tqdm's progress bar without the bar (glue: the display is no part of packing)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass


def load_packed_module() -> tuple[types.ModuleType, str]:
    """torchtune's datasets/_packed.py executed from the wheel, and torchtune's version."""
    path, version = _wheel.locate("torchtune", PACKED_PATH, _HINT)
    common = _wheel.exec_file(_wheel.locate("torchtune", COMMON_PATH, _HINT)[0],
                              "_thd_conformance_torchtune_common", {})
    s = _wheel.stub_module
    stubs = {"tqdm": s("tqdm", {"tqdm": _QuietBar}),
             "torchtune": s("torchtune", package=True),
             "torchtune.data": s("torchtune.data", package=True),
             "torchtune.data._common": common}
    module = _wheel.exec_file(path, "_thd_conformance_torchtune_packed", stubs)
    if not hasattr(module, "PackedDataset"):
        raise RuntimeError(f"torchtune {version} has no datasets._packed.PackedDataset")
    return module, version


class TorchtuneTarget:
    """Adapter over torchtune's PackedDataset (max_seq_len = fixed_total; one pack, one rank)."""

    name = "torchtune"
    declared = Declared(
        features=frozenset({"fixed_total", "need_roll"}),
        # zero_length kept: an empty sample keeps its seq_lens entry inside a pack; a batch
        # with no token makes no pack at all (the named all-empty cases report it).
        lacks=frozenset({"tensor_parallel", "zigzag", "contiguous"}),
        convention={"tail": "segment", "seq_align": "none", "labels": "ignore"},
        validated_elsewhere=frozenset({"config", "parallel_state", "batch", "need_roll_type"}),
        max_rows=1 << 20,
    )

    def __init__(self) -> None:
        self.module, self.version = load_packed_module()
        self.description = (f"torchtune {self.version} PackedDataset (max_seq_len = "
                            "fixed_total; one pack, one rank)")

    def packs(self, seqs: list[np.ndarray], max_seq_len: int,
              pad_value: Any = 0) -> tuple[list[dict[str, Any]], Any]:
        """torchtune's packs of `seqs` and the vocabulary that maps their ids to rows."""
        vocab = _tokens.Vocabulary(seqs, pad_value)
        samples = [{"tokens": list(ids), "labels": list(ids)} for ids in vocab.ids]
        ds = self.module.PackedDataset(samples, max_seq_len=max_seq_len,
                                       padding_idx=_tokens.PAD_ID)
        return [ds[i] for i in range(len(ds))], vocab

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        _tokens.refuse_undeclared(config, "torchtune's PackedDataset", ("fixed_total",))
        fixed = config.get("fixed_total")
        total = sum(int(np.shape(s)[0]) for s in seqs)
        packs, vocab = self.packs(seqs, fixed if fixed is not None else total, pad_value)
        if len(packs) > 1:
            raise ValueError(f"fixed_total={fixed}: torchtune packs this batch of {total} rows "
                             f"into {len(packs)} packs of max_seq_len={fixed}")
        if not packs:  # every sample empty: torchtune builds no pack (nothing to lose)
            empty = np.zeros(0, dtype=np.int64)
            packs = [{"tokens": empty, "labels": empty, "input_pos": empty, "seq_lens": empty}]
        pack = {key: value.numpy() if hasattr(value, "numpy") else value
                for key, value in packs[0].items()}
        label_ids = _tokens.shift_labels(pack["labels"])
        labels = vocab.label_rows(label_ids, int(config.get("ignore_index", -100)))
        # int32, as a caller handing them to flash or TE attention casts them (torchtune's own
        # flex-attention mask reads the int64 seq_lens).
        seq_lens = np.asarray(pack["seq_lens"]).astype(np.int32)
        cu = np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int32)
        meta = {"cu_seqlens_padded": cu, "seqlens_padded": seq_lens,
                "total": int(cu[-1]), "local_rows": int(len(pack["tokens"]))}
        rows = labels if need_roll else vocab.rows(pack["tokens"])
        return Packed(rows, np.asarray(pack["input_pos"]), meta, labels=labels,
                      loss_mask=label_ids != _tokens.IGNORE_INDEX)


TARGET = TorchtuneTarget
