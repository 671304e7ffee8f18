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
from ._wiring import fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "5.24.0"
_COLLATOR = "transformers.data.data_collator.DataCollatorWithFlattening"
_SEPARATOR = not_wired(
    "the label written at each sequence's start (-100): the suite's ignore_index is not handed "
    "over, as the glue's label ids could equal it; needs token-id labels apart from the rows in "
    "the protocol")
_LABELS = not_wired("prebuilt labels (a completion mask): the protocol hands no caller labels "
                    "in; needs an input-labels rule (R-LABEL)")
WIRING = {
    _COLLATOR: {
        "args": no_effect("DefaultDataCollator's return_tensors"),
        "return_position_ids": fixed("True: the position ids padding-free attention reads"),
        "separator_id": _SEPARATOR,
        "return_flash_attn_kwargs": fixed("True: cu_seq_lens_q and max_length_q, the metadata"),
        "return_seq_idx": not_wired("seq_idx (each row's sequence, for linear attention): the "
                                    "protocol has no key for it; needs an R-META rule"),
        "position_ids_start": not_wired("positions from another start: the spec's position "
                                        "ids start at 0 (R-POS-1); needs an offset rule"),
        "kwargs": no_effect("DefaultDataCollator's return_tensors"),
    },
    f"{_COLLATOR}.__call__": {
        "features.input_ids": wired("seqs (one example per sequence)"),
        "features.labels": _LABELS,
        "return_tensors": no_effect("'pt' (the tensor library)"),
        "separator_id": _SEPARATOR,
    },
}


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
