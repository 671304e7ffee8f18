"""The `trl` target: TRL 1.16's padding-free collator, from its wheel.

`DataCollatorForLanguageModeling(padding_free=True, pad_to_multiple_of=bucket)` and its `pad`,
compiled from the wheel's source (the modules import accelerate, datasets and pandas);
`_tokens.py` turns rows into ids and back. `cu_seqlens_padded` = `cu_seq_lens_q`: one segment
per non-empty example, then one per padding row (`tail="tokens"`). One rank. Two input forms:
`TARGET` gives one example per sequence; `PREPACKED` (`--target thd_packing.peers.trl:PREPACKED`)
gives the batch as one pre-packed example with its `seq_lengths`, as `pack_dataset`'s rows
reach the collator. Mapping, verdict and findings: docs/findings/trl.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.protocol import Config, Declared, Packed

from . import _tokens, _wheel
from ._wiring import fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "1.16.0"
COLLATOR_PATH = "trl/trainer/sft_trainer.py"
UTILS_PATH = "trl/trainer/utils.py"
_HINT = f"`nox -s conformance -- --target trl` installs trl=={EXPECTED_VERSION} --no-deps"
_COLLATOR = "trl.trainer.sft_trainer.DataCollatorForLanguageModeling"
_BIN = ("the bin step (which examples share a row): no protocol key yet; needs the spec's bin "
        "rules in the protocol")
WIRING = {
    _COLLATOR: {
        "pad_token_id": not_wired(
            "the pad token's row is pad_value; declaring pad_value turns on the pad-value "
            "rejection tests (R-ERR-1/10), which validated_elsewhere cannot decline for a "
            "token-id packer; needs that decline"),
        "padding_free": fixed("True: the THD path; False is a padded [B, S] batch"),
        "return_position_ids": no_effect("read only when padding_free is False"),
        "pad_to_multiple_of": wired("bucket"),
        "return_tensors": no_effect("'pt', the only one supported"),
    },
    f"{_COLLATOR}.torch_call": {
        "examples.input_ids": wired("seqs (one example per sequence; PREPACKED: one row)"),
        "examples.seq_lengths": wired("the pre-packed form (PREPACKED)"),
        "examples.labels": not_wired(
            "prebuilt labels (a completion mask, -100 on the prompt): the protocol hands no "
            "caller labels in; needs an input-labels rule (R-LABEL)"),
    },
    f"{_COLLATOR}.get_position_ids_from_packed_seq_lengths": {
        "batch_seq_lengths": wired("the pre-packed form (PREPACKED)"),
    },
    "trl.trainer.utils.pad": {
        "tensors": wired("seqs (through torch_call)"),
        "padding_value": fixed("torch_call passes pad_token_id, -100 and 0"),
        "padding_side": fixed("'right' from torch_call"),
        "pad_to_multiple_of": wired("bucket"),
    },
    "trl.data_utils.pack_dataset": {
        "dataset": not_wired(_BIN),
        "seq_length": not_wired(_BIN),
        "strategy": not_wired(_BIN + " ('bfd', 'bfd_split', 'wrapped')"),
        "map_kwargs": no_effect("datasets.map's options (processes, cache)"),
    },
}


def load_collator_class() -> tuple[type, str]:
    """TRL's DataCollatorForLanguageModeling compiled from the wheel, and trl's version."""
    path, version = _wheel.locate("trl", COLLATOR_PATH, _HINT)
    utils_path, _ = _wheel.locate("trl", UTILS_PATH, _HINT)
    from transformers.data.data_collator import DataCollatorMixin

    pad = _wheel.load_function(utils_path, "pad", {"np": np, "torch": torch})
    namespace = {"dataclass": dataclasses.dataclass, "DataCollatorMixin": DataCollatorMixin,
                 "Any": Any, "torch": torch, "pad": pad}
    return _wheel.load_class(path, "DataCollatorForLanguageModeling", namespace), version


class TrlTarget:
    """Adapter over TRL's padding-free DataCollatorForLanguageModeling (one rank)."""

    name = "trl"
    declared = Declared(
        features=frozenset({"bucket", "need_roll"}),
        convention={"tail": "tokens", "seq_align": "none", "labels": "ignore",
                    "zero_length": "omit"},
        # zero_length omitted from the metadata (spec 1.2, R-META-8): the collator crashes on the
        # batch of only empty examples; the suite gives an omitting target that batch only as the
        # contract tier's named degenerate case, where it is reported (docs/findings).
        lacks=frozenset({"tensor_parallel", "zigzag", "contiguous"}),
        validated_elsewhere=frozenset({"config", "parallel_state", "batch", "need_roll_type"}),
        max_rows=1 << 20,
    )

    def __init__(self) -> None:
        self.collator_class, self.version = load_collator_class()
        self.description = (f"trl {self.version} DataCollatorForLanguageModeling "
                            "(padding_free, pad_to_multiple_of = bucket; one rank)")

    def examples(self, ids: list[list[int]]) -> list[dict[str, Any]]:
        """The collator's examples: one per sequence."""
        return [{"input_ids": seq} for seq in ids]

    def collate(self, seqs: list[np.ndarray], bucket: int | None,
                pad_value: Any = 0) -> tuple[Any, Any]:
        """The collator's batch for `seqs` and the vocabulary that maps its ids to rows."""
        vocab = _tokens.Vocabulary(seqs, pad_value)
        collator = self.collator_class(pad_token_id=_tokens.PAD_ID, padding_free=True,
                                       pad_to_multiple_of=bucket)
        return collator(self.examples(vocab.ids)), vocab

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        _tokens.refuse_undeclared(config, "TRL's padding-free collator", ("bucket",))
        out, vocab = self.collate(seqs, config.get("bucket"), pad_value)
        label_ids = _tokens.shift_labels(out["labels"].numpy())
        labels = vocab.label_rows(label_ids, int(config.get("ignore_index", -100)))
        cu = out["cu_seq_lens_q"].numpy()
        meta = {"cu_seqlens_padded": cu, "seqlens_padded": np.diff(cu),
                "max_seqlen": out["max_length_q"], "total": int(cu[-1]),
                "local_rows": int(out["input_ids"].shape[1])}
        rows = labels if need_roll else vocab.rows(out["input_ids"].numpy())
        return Packed(rows, out["position_ids"].numpy()[0], meta, labels=labels,
                      loss_mask=label_ids != _tokens.IGNORE_INDEX)


class TrlPrepackedTarget(TrlTarget):
    """The same collator on the pre-packed form: the batch as one example whose `seq_lengths`
    are the sequences' lengths, as `pack_dataset` hands its rows to the collator."""

    name = "trl-prepacked"

    def __init__(self) -> None:
        super().__init__()
        self.description = (f"trl {self.version} DataCollatorForLanguageModeling (padding_free, "
                            "one pre-packed example with seq_lengths; one rank)")

    def examples(self, ids: list[list[int]]) -> list[dict[str, Any]]:
        # pack_dataset leaves empty examples out before it packs (data_utils.py:741-743), so
        # its seq_lengths hold no 0
        return [{"input_ids": [i for seq in ids for i in seq],
                 "seq_lengths": [len(seq) for seq in ids if seq]}]


TARGET = TrlTarget
PREPACKED = TrlPrepackedTarget
