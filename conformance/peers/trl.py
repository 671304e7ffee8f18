"""The `trl` target: TRL 1.16's padding-free collator, from its wheel.

What runs: `DataCollatorForLanguageModeling` from `trl/trainer/sft_trainer.py` (trl 1.16.0,
`pip install --no-deps trl==1.16.0`) with `padding_free=True` and `pad_to_multiple_of`, the
collator `SFTTrainer` builds for padding-free training, and the `pad` helper it calls
(`trl/trainer/utils.py`). sft_trainer.py and utils.py import accelerate, datasets and pandas,
which a packing check does not need, so only the class definition (sft_trainer.py lines
86-254) and `pad`'s definition (utils.py line 128) are compiled from the wheel's source, with
transformers' real `DataCollatorMixin` as the base class; tracebacks point into the wheel.
`torch_call` (lines 168-228) concatenates the examples into one row, pads it with
`pad_token_id` to a multiple of `pad_to_multiple_of` (position ids padded with 0, labels with
-100), sets -100 at every label whose position id is 0, and derives `cu_seq_lens_q` from the
position ids' zeros (lines 211-214), so each padding row is a one-row segment.

Glue (conformance/peers/_tokens.py): the rows as token ids and back (pad token id 0, whose row
holds `pad_value`), and the shift of the unshifted labels that transformers' causal loss does.

Mapping: `bucket` = `pad_to_multiple_of` (one rank: M = the bucket); `cu_seqlens_padded` =
`cu_seq_lens_q`, one segment per non-empty example then one per padding row (spec 1.2's
`tail="tokens"`, R-TAIL-3; empty examples leave no segment: zero-length omitted, R-META-8);
`max_seqlen` = `max_length_q`; rows, `position_ids`, shifted `labels`, `loss_mask`. TRL has no
tensor or context parallelism in the collator (its sequence parallelism shards the padded,
non-padding-free batch elsewhere).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from ..protocol import Config, Declared, Packed
from . import _tokens, _wheel

EXPECTED_VERSION = "1.16.0"
COLLATOR_PATH = "trl/trainer/sft_trainer.py"
UTILS_PATH = "trl/trainer/utils.py"
_HINT = f"`nox -s conformance -- --target trl` installs trl=={EXPECTED_VERSION} --no-deps"


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

    def collate(self, seqs: list[np.ndarray], bucket: int | None,
                pad_value: Any = 0) -> tuple[Any, Any]:
        """The collator's batch for `seqs` and the vocabulary that maps its ids to rows."""
        vocab = _tokens.Vocabulary(seqs, pad_value)
        collator = self.collator_class(pad_token_id=_tokens.PAD_ID, padding_free=True,
                                       pad_to_multiple_of=bucket)
        return collator([{"input_ids": ids} for ids in vocab.ids]), vocab

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


TARGET = TrlTarget
