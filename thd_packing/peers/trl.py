"""The `trl` target: TRL 1.16's padding-free collator, from its wheel.

`DataCollatorForLanguageModeling(padding_free=True, pad_to_multiple_of=bucket)` and its `pad`,
compiled from the wheel's source (the modules import accelerate, datasets and pandas);
`_tokens.py` turns rows into ids and back. `cu_seqlens_padded` = `cu_seq_lens_q`: one segment
per non-empty example, then one per padding row (`tail="tokens"`). One rank.
Mapping, verdict and findings: docs/findings/trl.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.protocol import Config, Declared, Packed

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
