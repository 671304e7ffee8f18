"""The `torchtitan` target: torchtitan 0.3.0's document stream and varlen metadata, from its wheel.

`HuggingFaceTextDataset.__iter__` and `create_varlen_metadata_for_document`, compiled from the
wheel's source (the modules import the training stack). One window of `seq_len = S` rows holds
the batch (a tokenizer appends EOS, so the window's inputs are the rows); `cu_seqlens_padded` =
`cu_seqlens` = `cu_seq_q`. Empty documents leave no segment: `zero_length: "omit"`.
Mapping, verdict and findings: docs/findings/torchtitan.md.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np
import torch

from thd_packing.conformance.protocol import Config, Declared, Packed

from . import _tokens, _wheel
from ._wiring import fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "0.3.0"
TEXT_PATH = "torchtitan/hf_datasets/text_datasets.py"
ATTENTION_PATH = "torchtitan/models/common/attention.py"
_HINT = (f"`nox -s conformance -- --target torchtitan` installs torchtitan=={EXPECTED_VERSION} "
         "--no-deps")
_PAD_VALUE = not_wired(
    "pad_value: the pad token's row; declaring pad_value turns on the pad-value rejection tests "
    "(R-ERR-1/10), which validated_elsewhere cannot decline for a token-id packer; needs that "
    "decline")
_TEXT = "torchtitan.hf_datasets.text_datasets.HuggingFaceTextDataset"
WIRING = {
    _TEXT: {
        "dataset_name": no_effect("which dataset is read; the glue's list stands for it"),
        "dataset_path": no_effect("where the dataset is read from"),
        "tokenizer": fixed("the glue's: a document is its ids, EOS appended"),
        "seq_len": wired("the batch's total (one window); a window shorter than the batch "
                         "cuts documents: needs a stream rule (windows over documents)"),
        "dp_rank": not_wired("the data-parallel shard of the stream: the bin step's kind; "
                             "needs the spec's bin rules in the protocol"),
        "dp_world_size": not_wired("as dp_rank"),
        "infinite": fixed("False: one pass over the batch"),
    },
    f"{_TEXT}._normalize_positions": {
        "positions": wired("the window's position ids (documents cut by the window start "
                           "at 0)"),
    },
    "torchtitan.models.common.attention.create_varlen_metadata_for_document": {
        "positions": wired("the window's position ids"),
        "include_host_offsets": no_effect("adds host copies of the same offsets"),
    },
}
EOS_ID = 0
# The stream's "run out of data" warning at the end of each batch: no part of the packing.
_LOG = logging.getLogger("thd_conformance.torchtitan")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False


class _NoHFDataset:
    """Stands for `datasets.Dataset` in `_get_data_iter`'s isinstance: the samples are a list."""


class _Tokenizer:
    """Glue: a document is already its token ids; EOS appended, no BOS."""

    def encode(self, text: list[int], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        return [*text, EOS_ID] if add_eos else list(text)


def load_torchtitan() -> tuple[type, Any, str]:
    """The text stream class (torchtitan's methods on the glue's object), the varlen metadata
    function, and torchtitan's version."""
    text_path, version = _wheel.locate("torchtitan", TEXT_PATH, _HINT)
    attention_path, _ = _wheel.locate("torchtitan", ATTENTION_PATH, _HINT)
    owner = "HuggingFaceTextDataset"
    ns: dict[str, Any] = {"torch": torch, "Dataset": _NoHFDataset,
                          "logger": _LOG}
    methods = {name: _wheel.load_function(text_path, name, ns, owner)
               for name in ("__iter__", "_get_data_iter", "_normalize_positions")}
    stream = type("_TorchtitanTextStream", (), methods)
    varlen_cls = _wheel.load_class(attention_path, "VarlenMetadata",
                                   {"NamedTuple": NamedTuple, "torch": torch})
    spmd = _wheel.stub_module("spmd_types", callables=("is_type_checking", "mutate_type"))
    metadata = _wheel.load_function(
        attention_path, "create_varlen_metadata_for_document",
        {"torch": torch, "VarlenMetadata": varlen_cls, "spmd": spmd,
         "get_spmd_backend": lambda: "none"})
    return stream, metadata, version


class TorchtitanTarget:
    """Adapter over torchtitan's document stream (one window of S rows) and varlen metadata."""

    name = "torchtitan"
    declared = Declared(
        convention={"seq_align": "none", "zero_length": "omit"},
        # zero_length omitted from the metadata (spec 1.2, R-META-8); the stream makes no window
        # from a batch of only empty documents, which the adapter reports as an empty pack.
        lacks=frozenset({"tensor_parallel", "zigzag", "contiguous"}),
        validated_elsewhere=frozenset({"config", "parallel_state", "batch", "need_roll_type"}),
        max_rows=1 << 20,
    )

    def __init__(self) -> None:
        self.stream_class, self.varlen_metadata, self.version = load_torchtitan()
        self.description = (f"torchtitan {self.version} HuggingFaceTextDataset stream (one "
                            "window of S rows) + create_varlen_metadata_for_document")

    def windows(self, docs: list[list[int]], seq_len: int) -> list[tuple[Any, Any]]:
        """torchtitan's windows of `seq_len` rows over the documents, in order."""
        stream = self.stream_class()
        stream.__dict__.update(
            _data=docs, _tokenizer=_Tokenizer(), _text_processor=lambda doc: doc,
            seq_len=seq_len, infinite=False, dataset_name="batch", _sample_idx=0, _epoch=0,
            _inputs_buffer=[], _labels_buffer=[], _positions_buffer=[])
        return list(iter(stream))

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        _tokens.refuse_undeclared(config, "torchtitan's document stream")
        vocab = _tokens.Vocabulary(seqs, pad_value)
        total = sum(len(ids) for ids in vocab.ids)
        windows = self.windows(vocab.ids, total) if total else []
        if len(windows) > 1:
            raise RuntimeError(f"torchtitan cut {total} rows into {len(windows)} windows")
        if not windows:  # no token, no window: the stream yields nothing, an empty pack
            none = np.zeros(0, np.int64)
            return Packed(vocab.rows(none), none, {
                "cu_seqlens_padded": np.zeros(1, np.int32), "cu_seqlens": np.zeros(1, np.int32),
                "seqlens": none, "seqlens_padded": none, "total": 0, "local_rows": 0})
        inputs, positions = windows[0][0]["input"], windows[0][0]["positions"]
        meta_out = self.varlen_metadata(positions[None])
        cu = meta_out.cu_seq_q.numpy()
        meta = {"cu_seqlens_padded": cu, "cu_seqlens": cu, "seqlens": np.diff(cu),
                "seqlens_padded": np.diff(cu), "max_seqlen": meta_out.max_q,
                "total": total, "local_rows": int(inputs.shape[0])}
        return Packed(vocab.rows(inputs.numpy()), positions.numpy(), meta)


TARGET = TorchtitanTarget
