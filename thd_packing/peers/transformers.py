"""The `transformers` target: transformers 5.24.0's `DataCollatorWithFlattening`, from its wheel.

The collator as the library ships it, constructed as a padding-free trainer does
(`return_flash_attn_kwargs=True`, `return_seq_idx=True`); `_tokens.py` turns rows into ids and
back and shifts the labels as the causal loss does. No padding: `cu_seqlens` =
`cu_seqlens_padded` = `cu_seq_lens_q`; empty examples dropped (`zero_length: "omit"`).
Mapping, verdict and findings: docs/findings/transformers.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from thd_packing.conformance.protocol import Config, Declared, Packed

from . import _tokens

EXPECTED_VERSION = "5.24.0"


def load_collator_class() -> tuple[type, str]:
    """transformers' DataCollatorWithFlattening and the installed version (RuntimeError with
    the install line where transformers is missing)."""
    try:
        import transformers
        from transformers.data.data_collator import DataCollatorWithFlattening
    except ImportError as exc:
        raise RuntimeError(
            f"transformers is not installed ({exc}); it is a test dependency: "
            f"pip install -e '.[test]' (transformers=={EXPECTED_VERSION})") from None
    return DataCollatorWithFlattening, transformers.__version__


class TransformersTarget:
    """Adapter over transformers' DataCollatorWithFlattening (one rank, no padding)."""

    name = "transformers"
    declared = Declared(
        features=frozenset({"need_roll"}),
        convention={"seq_align": "none", "labels": "ignore", "zero_length": "omit"},
        # zero_length omitted from the metadata (spec 1.2, R-META-8): the collator refuses the batch
        # of only empty examples by name; the suite gives an omitting target that batch only as the
        # contract tier's named degenerate case, where it is reported (docs/findings).
        lacks=frozenset({"tensor_parallel", "zigzag", "contiguous"}),
        validated_elsewhere=frozenset({"config", "parallel_state", "batch", "need_roll_type"}),
        max_rows=1 << 20,
    )

    def __init__(self) -> None:
        cls, self.version = load_collator_class()
        self.collator = cls(return_flash_attn_kwargs=True, return_seq_idx=True)
        self.description = (f"transformers {self.version} DataCollatorWithFlattening "
                            "(padding-free, one rank)")

    def collate(self, seqs: list[np.ndarray], pad_value: Any = 0) -> tuple[Any, Any]:
        """The collator's batch for `seqs` and the vocabulary that maps its ids to rows."""
        vocab = _tokens.Vocabulary(seqs, pad_value)
        return self.collator([{"input_ids": ids} for ids in vocab.ids]), vocab

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        _tokens.refuse_undeclared(config, "DataCollatorWithFlattening")
        out, vocab = self.collate(seqs, pad_value)
        label_ids = _tokens.shift_labels(out["labels"].numpy())
        labels = vocab.label_rows(label_ids, int(config.get("ignore_index", -100)))
        cu = out["cu_seq_lens_q"].numpy()
        meta = {"cu_seqlens_padded": cu, "cu_seqlens": cu, "seqlens": np.diff(cu),
                "seqlens_padded": np.diff(cu), "max_seqlen": out["max_length_q"],
                "total": int(cu[-1]), "local_rows": int(out["input_ids"].shape[1]),
                "num_seqs": int(cu.size - 1)}
        rows = labels if need_roll else vocab.rows(out["input_ids"].numpy())
        return Packed(rows, out["position_ids"].numpy()[0], meta, labels=labels,
                      loss_mask=label_ids != _tokens.IGNORE_INDEX)


TARGET = TransformersTarget
