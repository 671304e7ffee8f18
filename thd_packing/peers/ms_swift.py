"""The `ms-swift` target: ms-swift 4.6.0's Megatron padding-free packing, from its wheel.

`get_padding_to`, `Template._data_collator`, `get_packed_seq_params` and
`get_batch_on_this_cp_rank` (with mcore-bridge 1.6.5's `split_cp_inputs`), each compiled alone
from its wheel's file. The collator gets each token's row number (pad id -1), looked up after.
`cu_seqlens_padded` is `PackedSeqParams.cu_seqlens_q`; declared `seq_align="cp"`.
Mapping, verdict and findings: docs/findings/ms-swift.md.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from thd_packing.conformance.protocol import Config, Declared, Meta, NotDeclared, Packed

from . import _wheel

EXPECTED_VERSION = "4.6.0"
TEMPLATE = "swift/template/base.py"
MG_UTILS = "swift/megatron/utils/utils.py"
MG_LM_UTILS = "swift/megatron/utils/megatron_lm_utils.py"
TF_UTILS = "swift/utils/transformers_utils.py"
SPLIT = "mcore_bridge/utils/megatron_utils.py"
_HINT = ("`nox -s conformance -- --target ms-swift` installs ms-swift==4.6.0 and "
         "mcore-bridge==1.6.5 --no-deps")
PAD_ID = -1
_TEMPLATE_METHODS = ("_data_collator", "_handle_megatron_cp", "packing_row", "_pad_sequence",
                     "_data_collator_mm_data")


class _ParallelState:
    def __init__(self, cp: int, rank: int) -> None:
        self.cp, self.rank = cp, rank

    def get_context_parallel_world_size(self) -> int:
        return self.cp

    def get_context_parallel_rank(self) -> int:
        return self.rank


def swift_args(tp: int, cp: int) -> Any:
    """Glue: the Megatron arguments ms-swift's helpers read (its defaults, no FP8)."""
    return types.SimpleNamespace(
        tensor_model_parallel_size=tp, sequence_parallel=tp > 1, context_parallel_size=cp,
        fp8_recipe="delayed", fp8_format=None, fp8=None, fp4_format=None, fp4=None,
        attention_backend="flash", padding_free=True, is_multimodal=False,
        task_type="causal_lm", cp_partition_mode="zigzag")


class MsSwiftTarget:
    """Adapter over ms-swift's padding-free Megatron collator and CP split."""

    name = "ms-swift"
    declared = Declared(
        lacks=frozenset({"contiguous", "trailing_dims", "zero_length"}),
        convention={"seq_align": "cp"},
        validated_elsewhere=frozenset({"config", "parallel_state", "batch"}),
        max_rows=1 << 20,
    )

    def __init__(self) -> None:
        tpl, self.version = _wheel.locate("ms-swift", TEMPLATE, _HINT)
        mg, _ = _wheel.locate("ms-swift", MG_UTILS, _HINT)
        lm, _ = _wheel.locate("ms-swift", MG_LM_UTILS, _HINT)
        tf, _ = _wheel.locate("ms-swift", TF_UTILS, _HINT)
        split, self.bridge_version = _wheel.locate("mcore-bridge", SPLIT, _HINT)
        from megatron.core.packed_seq_params import PackedSeqParams

        typing_names = {n: getattr(typing, n) for n in ("Any", "Dict", "List", "Optional",
                                                        "Tuple", "Union")}
        tns: dict[str, Any] = {"torch": torch, "F": F, "math": math, "np": np,
                               "pad_sequence": pad_sequence, **typing_names}
        methods = {n: _wheel.load_function(tpl, n, tns, owner="Template")
                   for n in _TEMPLATE_METHODS}
        methods["concat_tensor"] = staticmethod(
            _wheel.load_function(tpl, "concat_tensor", tns, owner="Template"))
        self.template_class = type("SwiftTemplateGlue", (), methods)
        self.get_padding_to = _wheel.load_function(mg, "get_padding_to", {})
        self._mpu = _ParallelState(1, 0)
        npu = {"is_torch_npu_available": lambda: False}
        hf_params = _wheel.load_function(tf, "get_packed_seq_params", {"torch": torch})
        self.get_packed_seq_params = _wheel.load_function(mg, "get_packed_seq_params", {
            "torch": torch, "PackedSeqParams": PackedSeqParams,
            "_get_packed_seq_params": hf_params, **npu})
        split_cp_inputs = _wheel.load_function(split, "split_cp_inputs", {
            "torch": torch, "mpu": self._mpu, **typing_names})
        self.get_batch_on_this_cp_rank = _wheel.load_function(lm, "get_batch_on_this_cp_rank", {
            "torch": torch, "mpu": self._mpu, "split_cp_inputs": split_cp_inputs, **npu,
            **typing_names})
        self.description = (f"ms-swift {self.version} Template._data_collator (padding_free, "
                            f"Megatron), get_padding_to; mcore-bridge {self.bridge_version} "
                            "split_cp_inputs")

    def template(self, cp: int) -> Any:
        """Glue: the Template attributes the collator reads."""
        t = self.template_class()
        t.tokenizer = types.SimpleNamespace(pad_token_id=PAD_ID)
        t.padding_side, t.is_training, t.use_megatron = "right", True, True
        t.padding_free, t.sequence_parallel_size = True, cp
        return t

    def _declined(self, config: Config, need_roll: Any, pad_value: Any, seqs: Any) -> None:
        if need_roll:
            raise NotDeclared("ms-swift's labels are its own key, not wired")
        if not (type(pad_value) is int and pad_value == 0):
            raise NotDeclared("ms-swift pads ids with the tokenizer's pad id")
        for key in ("fp8", "bucket", "min_local_rows"):
            if config.get(key) not in (None, False):
                raise NotDeclared(f"{key}: not wired in this adapter")
        for key, default in (("seq_align", "cp"), ("max_num_seqs", None),
                             ("max_seqlen", "exact")):
            if config.get(key, default) != default:
                raise NotDeclared(f"{key}={config[key]!r}: not ms-swift's packing")
        if int(config.get("cp_size", 1)) > 1 and config.get("cp_layout", "zigzag") != "zigzag":
            raise NotDeclared("this adapter runs ms-swift's zigzag split")
        if any(np.asarray(s).ndim != 1 for s in seqs):
            raise NotDeclared("ms-swift packs token ids")

    def collate(self, lengths: list[int], tp: int, cp: int) -> dict[str, Any]:
        """ms-swift's collator on samples whose ids are their rows' numbers in the batch."""
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
        batch = [{"input_ids": list(range(int(starts[i]), int(starts[i + 1]))),
                  "length": int(n)} for i, n in enumerate(lengths)]
        return self.template(cp)._data_collator(
            batch, padding_to=self.get_padding_to(swift_args(tp, cp)))

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        self._declined(config, need_roll, pad_value, seqs)
        tp, cp = int(config.get("tp_size", 1)), int(config.get("cp_size", 1))
        seqs = [np.asarray(s) for s in seqs]
        res = self.collate([s.shape[0] for s in seqs], tp, cp)
        args = swift_args(tp, cp)
        batch = {"input_ids": res["input_ids"], "position_ids": res["position_ids"],
                 "packed_seq_params": self.get_packed_seq_params(args, res["position_ids"])}
        self._mpu.cp, self._mpu.rank = cp, int(cp_rank)
        batch = self.get_batch_on_this_cp_rank(args, batch)
        params = batch["packed_seq_params"]
        index = batch["input_ids"][0].numpy()
        flat = (np.concatenate(seqs) if seqs else np.zeros(0))
        rows = np.zeros(index.shape, dtype=flat.dtype)
        real = index != PAD_ID
        rows[real] = flat[index[real]]
        cu_padded = params.cu_seqlens_q.numpy()
        meta: Meta = {
            "cu_seqlens_padded": cu_padded,
            "seqlens_padded": np.diff(cu_padded),
            "max_seqlen": int(params.max_seqlen_q),
            "total": int(cu_padded[-1]),
            "local_rows": int(rows.shape[0]),
            "num_seqs": len(seqs),
        }
        return Packed(rows, batch["position_ids"][0].numpy(), meta)


TARGET = MsSwiftTarget
