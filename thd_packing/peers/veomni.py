"""The `veomni` target: VeOmni 0.1.12's `PackingCollator`, from its wheel.

`veomni/data/data_collator.py` from the wheel, executed on its own with its two dependency-free
helpers and stand-ins for its other imports (sequence parallelism off); `_tokens.py` turns rows
into ids and back. `fixed_total` = `pad_to_length`; `cu_seqlens_padded` = `cu_seq_lens_q`, the
padding coalesced into one segment (`tail="segment"`) though its position ids are all 0. CP is
VeOmni's Ulysses sequence parallelism: `SequenceParallelCollator` after the packing collator, as
`MainCollator` chains them, pads to a multiple of the SP size and slices contiguously
(`cp_layout="contiguous"`); it shifts the labels itself.
Mapping, verdict and findings: docs/findings/veomni.md.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.protocol import Config, Declared, NotDeclared, Packed

from . import _tokens, _wheel
from ._wiring import fixed, no_effect, wired

EXPECTED_VERSION = "0.1.12"
COLLATOR_PATH = "veomni/data/data_collator.py"
CONSTANTS_PATH = "veomni/utils/constants.py"
TRANSFORM_PATH = "veomni/utils/seqlen_pos_transform_utils.py"
_HINT = f"`nox -s conformance -- --target veomni` installs veomni=={EXPECTED_VERSION} --no-deps"
_COLLATORS = "veomni.data.data_collator"
WIRING = {
    f"{_COLLATORS}.PackingCollator": {
        "collate_infos": fixed("DEFAULT_DATA_COLLATE_INFO: the text keys' pack dims and pad "
                               "values"),
        "pad_to_length": wired("fixed_total"),
        "seq_classification": fixed("False: causal LM, the first label of each sequence "
                                    "ignored"),
        "metadata_collate_func": no_effect("multimodal metadata only"),
    },
    f"{_COLLATORS}.PackingCollator.__call__": {
        "features.input_ids": wired("seqs (one feature per sequence)"),
        "features.labels": wired("need_roll: the ids as labels; a prompt mask is not drawn"),
        "features.position_ids": fixed("arange(L) per feature, as the dataset gives"),
    },
    f"{_COLLATORS}.SequenceParallelCollator": {
        "collate_infos": fixed("DEFAULT_DATA_COLLATE_INFO: SP pad values and slicing per key"),
        "seq_classification": fixed("False: causal LM"),
        "metadata_collate_func": no_effect("multimodal metadata only"),
    },
    f"{_COLLATORS}.SequenceParallelCollator.__call__": {
        "batch": wired("cp_size, cp_rank (Ulysses SP: sp_size and sp_rank of veomni's "
                       "parallel state; cp_layout='contiguous')"),
    },
}


# veomni's parallel state as its collators read it when built: SP size and rank per pack
_SP_STATE = types.SimpleNamespace(sp_enabled=False, sp_size=1, sp_rank=0)


def _stubs() -> dict[str, types.ModuleType]:
    s = _wheel.stub_module
    state = _SP_STATE
    constants = _wheel.exec_file(_wheel.locate("veomni", CONSTANTS_PATH, _HINT)[0],
                                 "_thd_conformance_veomni_constants", {})
    transform = _wheel.exec_file(_wheel.locate("veomni", TRANSFORM_PATH, _HINT)[0],
                                 "_thd_conformance_veomni_seqlen_pos", {})
    log = s("veomni.utils.logging", {"get_logger": logging.getLogger})
    return {
        "veomni": s("veomni", package=True),
        "veomni.data": s("veomni.data", package=True),
        "veomni.distributed": s("veomni.distributed", package=True),
        "veomni.distributed.parallel_state": s("veomni.distributed.parallel_state",
                                               {"get_parallel_state": lambda: state}),
        "veomni.distributed.sequence_parallel": s("veomni.distributed.sequence_parallel",
                                                  callables=("gather_outputs",)),
        "veomni.utils": s("veomni.utils", {"logging": log}, package=True),
        "veomni.utils.logging": log,
        "veomni.utils.constants": constants,
        "veomni.utils.seqlen_pos_transform_utils": transform,
    }


def load_collator_module() -> tuple[types.ModuleType, str]:
    """VeOmni's data_collator.py executed from the wheel, and veomni's version."""
    path, version = _wheel.locate("veomni", COLLATOR_PATH, _HINT)
    module = _wheel.exec_file(path, "veomni.data._thd_conformance_data_collator", _stubs())
    if not hasattr(module, "PackingCollator"):
        raise RuntimeError(f"veomni {version} has no data_collator.PackingCollator")
    return module, version


class VeOmniTarget:
    """Adapter over VeOmni's PackingCollator (pad_to_length = fixed_total; one rank)."""

    name = "veomni"
    declared = Declared(
        features=frozenset({"fixed_total", "need_roll"}),
        # zero_length: the metadata omits empty sequences (spec 1.2's "omit", R-META-8, which the
        # suite reads); lacked: the collator crashes on any empty example, and outside the contract
        # tier's named degenerate cases that blocks half the rules (docs/findings).
        lacks=frozenset({"tensor_parallel", "zigzag", "zero_length"}),
        convention={"tail": "segment", "seq_align": "none", "labels": "ignore"},
        validated_elsewhere=frozenset({"config", "parallel_state", "batch", "need_roll_type"}),
        max_rows=1 << 20,
    )

    def __init__(self) -> None:
        self.module, self.version = load_collator_module()
        self.description = (f"veomni {self.version} PackingCollator (pad_to_length = "
                            "fixed_total), SequenceParallelCollator (cp = Ulysses SP)")

    def collate(self, seqs: list[np.ndarray], pad_to_length: int | None,
                pad_value: Any = 0, sp_size: int = 1,
                sp_rank: int = 0) -> tuple[dict[str, Any], Any]:
        """The collators' batch for `seqs` (SP rank `sp_rank` of `sp_size`) and the vocabulary
        that maps its ids to rows."""
        vocab = _tokens.Vocabulary(seqs, pad_value)
        _SP_STATE.sp_enabled = sp_size > 1
        _SP_STATE.sp_size, _SP_STATE.sp_rank = sp_size, sp_rank
        features = [{"input_ids": torch.tensor(ids, dtype=torch.int64),
                     "labels": torch.tensor(ids, dtype=torch.int64),
                     "position_ids": torch.arange(len(ids), dtype=torch.int64)}
                    for ids in vocab.ids]
        collator = self.module.PackingCollator(pad_to_length=pad_to_length or False)
        out = collator(features)
        if sp_size > 1:  # MainCollator's pipeline with SP on
            out = self.module.SequenceParallelCollator()(out)
        return out, vocab

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        sp = config.get("cp_size", 1)
        if sp != 1 and config.get("cp_layout", "zigzag") != "contiguous":
            raise NotDeclared("Ulysses SP slices contiguously: no zigzag")
        _tokens.refuse_undeclared({**config, "cp_size": 1}, "VeOmni's PackingCollator",
                                  ("fixed_total",))
        out, vocab = self.collate(seqs, config.get("fixed_total"), pad_value, sp, cp_rank)
        # with SP the collator has shifted the labels (what the loss reads); without, the
        # causal loss shifts them
        label_ids = (out["labels"].numpy().reshape(-1) if sp > 1
                     else _tokens.shift_labels(out["labels"].numpy()))
        labels = vocab.label_rows(label_ids, int(config.get("ignore_index", -100)))
        cu = out["cu_seq_lens_q"].numpy()
        meta = {"cu_seqlens_padded": cu, "seqlens_padded": np.diff(cu),
                "max_seqlen": int(out["max_length_q"]), "total": int(cu[-1]),
                "local_rows": int(out["input_ids"].shape[-1])}
        rows = labels if need_roll else vocab.rows(out["input_ids"].numpy())
        return Packed(rows, out["position_ids"].numpy().reshape(-1), meta, labels=labels,
                      loss_mask=label_ids != _tokens.IGNORE_INDEX)


TARGET = VeOmniTarget
