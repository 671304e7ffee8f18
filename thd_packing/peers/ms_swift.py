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
from ._wiring import fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "4.6.0"
TEMPLATE = "swift/template/base.py"
MG_UTILS = "swift/megatron/utils/utils.py"
MG_LM_UTILS = "swift/megatron/utils/megatron_lm_utils.py"
TF_UTILS = "swift/utils/transformers_utils.py"
SPLIT = "mcore_bridge/utils/megatron_utils.py"
TRAINER_UTILS = "swift/megatron/trainers/utils.py"
_HINT = ("`nox -s conformance -- --target ms-swift` installs ms-swift==4.6.0 and "
         "mcore-bridge==1.6.5 --no-deps")
PAD_ID = -1
IGNORE_INDEX = -100
# config fp8 recipe -> the Megatron arguments a run of that recipe sets (fp8_format, fp8_recipe,
# fp4_format)
FP8_ARGS = {"tensor": ("e4m3", "tensorwise", None), "mxfp8": ("e4m3", "mxfp8", None),
            "block": ("e4m3", "blockwise", None), "nvfp4": (None, "delayed", "e2m1")}
_TPL = "swift.template.base.Template"
_MG = "swift.megatron.utils.utils"
_BIN = ("the bin step (ms-swift's packing dataset, binpacking.to_constant_volume): no protocol "
        "key yet; needs the spec's bin rules in the protocol")
_ARGS = {
    "args.tensor_model_parallel_size": wired("tp_size"),
    "args.sequence_parallel": fixed("tp > 1: Megatron's sequence parallelism, which "
                                    "get_padding_to reads tp from"),
    "args.context_parallel_size": wired("cp_size"),
    "args.fp8_recipe": wired("fp8 recipes: tensor, mxfp8, block (tensorwise, mxfp8, "
                             "blockwise)"),
    "args.fp8_format": wired("fp8 recipes (e4m3)"),
    "args.fp8": no_effect("read only where fp8_format is unset"),
    "args.fp4_format": wired("fp8='nvfp4' (e2m1)"),
    "args.fp4": no_effect("read only where fp4_format is unset"),
    "args.attention_backend": not_wired(
        "'fused' pads the total to a multiple of 64 * tp * cp (cuDNN): no spec rule; needs an "
        "attention-backend total alignment (R-TOTAL-1's kind)"),
}
WIRING = {
    f"{_TPL}._data_collator": {
        "batch.input_ids": wired("seqs (each token's row number)"),
        "batch.labels": wired("need_roll (labels='ignore')"),
        "batch.length": wired("seqs (the lengths)"),
        "batch.loss_scale": not_wired("per-token loss weights: the spec has no loss weights; "
                                      "needs a weight rule beside R-LABEL"),
        "padding_to": wired("tp_size, cp_size, fp8 recipes (get_padding_to)"),
    },
    f"{_TPL}._handle_megatron_cp": {
        "batch": wired("cp_size (each sequence to 2 * cp)"),
    },
    f"{_TPL}.packing_row": {
        "row": wired("seqs (one packed row)"),
    },
    f"{_MG}.get_padding_to": _ARGS,
    f"{_MG}.get_packed_seq_params": {
        "args": no_effect("read for nothing but the NPU path"),
        "position_ids": wired("the collator's position ids"),
    },
    "swift.megatron.utils.megatron_lm_utils.get_batch_on_this_cp_rank": {
        "args.is_multimodal": fixed("False: text models split input_ids here"),
        "args.task_type": fixed("'causal_lm'"),
        "args.cp_partition_mode": not_wired(
            "'contiguous': the collator still pads each sequence to 2 * cp, so the convention "
            "depends on the layout (seq_align 2*cp under contiguous); needs a per-layout "
            "seq_align in the protocol (R-ALIGN-5)"),
        "batch": wired("the collated batch: input_ids, labels, position_ids"),
    },
    "mcore_bridge.utils.megatron_utils.split_cp_inputs": {
        "inputs": wired("rows, labels, position ids"),
        "cu_seqlens": wired("cu_seqlens_padded"),
        "dim": fixed("-1, from get_batch_on_this_cp_rank"),
        "cp_partition_mode": not_wired("as get_batch_on_this_cp_rank's cp_partition_mode"),
    },
    "swift.megatron.trainers.utils.get_batch_on_this_pp_rank": {
        "args.task_type": fixed("'causal_lm': labels rolled by -1"),
        "args.pipeline_model_parallel_size": fixed("1: one stage holds the labels"),
        "data.labels": wired("need_roll (labels='ignore')"),
        "data.loss_scale": not_wired("as _data_collator's loss_scale"),
        "vp_stage": no_effect("pipeline stages only"),
    },
    "swift.utils.transformers_utils.get_packed_seq_params": {
        "position_ids": wired("the collator's position ids"),
    },
}
_TEMPLATE_METHODS = ("_data_collator", "_handle_megatron_cp", "packing_row", "_pad_sequence",
                     "_data_collator_mm_data")


class _ParallelState:
    def __init__(self, cp: int, rank: int) -> None:
        self.cp, self.rank = cp, rank

    def get_context_parallel_world_size(self) -> int:
        return self.cp

    def get_context_parallel_rank(self) -> int:
        return self.rank


def swift_args(tp: int, cp: int, fp8: Any = False) -> Any:
    """Glue: the Megatron arguments ms-swift's helpers read (its defaults; an FP8 recipe's
    format and recipe, FP8_ARGS)."""
    fp8_format, fp8_recipe, fp4_format = FP8_ARGS.get(fp8, (None, "delayed", None))
    return types.SimpleNamespace(
        tensor_model_parallel_size=tp, sequence_parallel=tp > 1, context_parallel_size=cp,
        fp8_recipe=fp8_recipe, fp8_format=fp8_format, fp8=None, fp4_format=fp4_format,
        fp4=None, attention_backend="flash", padding_free=True, is_multimodal=False,
        task_type="causal_lm", cp_partition_mode="zigzag", pipeline_model_parallel_size=1)


class MsSwiftTarget:
    """Adapter over ms-swift's padding-free Megatron collator and CP split."""

    name = "ms-swift"
    declared = Declared(
        features=frozenset({"fp8_recipes", "need_roll"}),
        lacks=frozenset({"contiguous", "trailing_dims", "zero_length"}),
        convention={"seq_align": "cp", "labels": "ignore"},
        # need_roll is the glue's choice of rows or labels: ms-swift has no such argument
        validated_elsewhere=frozenset({"config", "parallel_state", "batch", "need_roll_type"}),
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
        trainer_utils, _ = _wheel.locate("ms-swift", TRAINER_UTILS, _HINT)
        self.get_batch_on_this_pp_rank = _wheel.load_function(
            trainer_utils, "get_batch_on_this_pp_rank", {
                "torch": torch, "mpu": self._mpu, "get_current_device": lambda: "cpu",
                # swift.utils.to_device on the CPU: the batch as it is
                "to_device": lambda data, device, non_blocking=False: data})
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
        if not (type(pad_value) is int and pad_value == 0):
            raise NotDeclared("ms-swift pads ids with the tokenizer's pad id")
        for key in ("bucket", "min_local_rows"):
            if config.get(key) not in (None, False):
                raise NotDeclared(f"{key}: ms-swift has none")
        if config.get("fp8", False) is not False and config.get("fp8") not in FP8_ARGS:
            raise NotDeclared("ms-swift's FP8 is by recipe (fp8_recipe, fp4_format)")
        for key, default in (("seq_align", "cp"), ("labels", "ignore"), ("max_num_seqs", None),
                             ("max_seqlen", "exact")):
            if config.get(key, default) != default:
                raise NotDeclared(f"{key}={config[key]!r}: not ms-swift's packing")
        if int(config.get("cp_size", 1)) > 1 and config.get("cp_layout", "zigzag") != "zigzag":
            raise NotDeclared("this adapter runs ms-swift's zigzag split")
        if any(np.asarray(s).ndim != 1 for s in seqs):
            raise NotDeclared("ms-swift packs token ids")

    def collate(self, lengths: list[int], tp: int, cp: int, fp8: Any = False) -> dict[str, Any]:
        """ms-swift's collator on samples whose ids are their rows' numbers in the batch; the
        labels as the encoder leaves them: the ids, the first -100 (base.py:1649-1650)."""
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(int)
        batch = []
        for i, n in enumerate(lengths):
            ids = list(range(int(starts[i]), int(starts[i + 1])))
            batch.append({"input_ids": ids, "labels": [IGNORE_INDEX, *ids[1:]],
                          "length": int(n)})
        return self.template(cp)._data_collator(
            batch, padding_to=self.get_padding_to(swift_args(tp, cp, fp8)))

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        self._declined(config, need_roll, pad_value, seqs)
        tp, cp = int(config.get("tp_size", 1)), int(config.get("cp_size", 1))
        seqs = [np.asarray(s) for s in seqs]
        fp8 = config.get("fp8", False)
        res = self.collate([s.shape[0] for s in seqs], tp, cp, fp8)
        args = swift_args(tp, cp, fp8)
        # prepare_batch (trainers/utils.py:379-409): the pp step rolls the labels, then the
        # packed params from the position ids, then the CP split
        data = {"input_ids": res["input_ids"], "labels": res["labels"],
                "position_ids": res["position_ids"]}
        batch = self.get_batch_on_this_pp_rank(args, data)
        batch["packed_seq_params"] = self.get_packed_seq_params(args, batch["position_ids"])
        self._mpu.cp, self._mpu.rank = cp, int(cp_rank)
        batch = self.get_batch_on_this_cp_rank(args, batch)
        params = batch["packed_seq_params"]
        index = batch["input_ids"][0].numpy()
        flat = (np.concatenate(seqs) if seqs else np.zeros(0))
        rows = np.zeros(index.shape, dtype=flat.dtype)
        real = index != PAD_ID
        rows[real] = flat[index[real]]
        # the label ids as rows (the embedding of the label token), ignore_index where -100
        label_ids = batch["labels"][0].numpy()
        keep = label_ids != IGNORE_INDEX
        labels = np.full(label_ids.shape, int(config.get("ignore_index", IGNORE_INDEX)))
        labels = labels.astype(flat.dtype)
        labels[keep] = flat[label_ids[keep]]
        cu_padded = params.cu_seqlens_q.numpy()
        meta: Meta = {
            "cu_seqlens_padded": cu_padded,
            "seqlens_padded": np.diff(cu_padded),
            "max_seqlen": int(params.max_seqlen_q),
            "total": int(cu_padded[-1]),
            "local_rows": int(rows.shape[0]),
            "num_seqs": len(seqs),
        }
        return Packed(labels if need_roll else rows, batch["position_ids"][0].numpy(), meta,
                      labels=labels, loss_mask=keep)


TARGET = MsSwiftTarget
