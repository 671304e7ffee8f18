"""The `megatron-bridge` target: Megatron-Bridge 0.3.1's in-batch THD packing, from its wheel.

Bridge's `pack_batch_sequences`, `get_packed_seq_params` and `slice_batch_for_context_parallel`
from the wheel, in the order its VLM step calls them; TE's `thd_get_partitioned_indices` (CUDA,
not installed) is glue written from its documented behaviour. `cu_seqlens_padded` is
`PackedSeqParams.cu_seqlens_q`; declared `seq_align="cp"` (sequences to `2 * cp`, tp left out).
Mapping, verdict and findings: docs/findings/megatron-bridge.md.
"""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.protocol import Config, Declared, Meta, NotDeclared, Packed

from . import _wheel
from ._wiring import fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "0.3.1"
DIST = "megatron-bridge"
VLM_STEP = "megatron/bridge/training/vlm_step.py"
PACKED_PARAMS = "megatron/bridge/training/utils/packed_seq_utils.py"
COMMON = "megatron/bridge/utils/common_utils.py"
_HINT = (f"`nox -s conformance -- --target megatron-bridge` installs "
         f"megatron-bridge=={EXPECTED_VERSION} --no-deps")
IGNORE_INDEX = -100
_BIN = "the bin step: no protocol key yet; needs the spec's bin rules in the protocol"
WIRING = {
    "megatron.bridge.training.vlm_step.pack_batch_sequences": {
        "tokens": wired("seqs (right-padded [B, S] by the glue)"),
        "labels": wired("labels beside the rows (the model tier, R-MODEL-4)"),
        "loss_mask": wired("loss_mask beside the rows (the model tier)"),
        "attention_mask": no_effect("a [B, 1, S, S] causal mask the packed path drops (it "
                                    "returns None); lengths come from the tokens"),
        "position_ids": fixed("arange(S) per row, the collated batch's"),
        "pad_token_id": not_wired(
            "the token value whose trailing run ends a sequence, and the padding's fill: 0, "
            "Bridge's collate pad; declaring pad_value turns on the pad-value rejection tests "
            "(R-ERR-1/10), which validated_elsewhere cannot decline for a token-id packer; "
            "needs that decline"),
        "pad_to_multiple_of": wired("cp_size (2 * cp, as the step passes)"),
    },
    "megatron.bridge.training.utils.packed_seq_utils.get_packed_seq_params": {
        "batch.cu_seqlens": wired("cu_seqlens_padded, from pack_batch_sequences"),
        "batch.max_seqlen": wired("max_seqlen, from pack_batch_sequences"),
        "batch.cu_seqlens_argmin": fixed("the entry count, as forward_step passes"),
    },
    "megatron.bridge.utils.common_utils.slice_batch_for_context_parallel": {
        "inputs_embeds": wired("rows"),
        "labels": wired("labels beside the rows"),
        "loss_mask": wired("loss_mask beside the rows"),
        "position_ids": wired("position ids"),
        "attention_mask": fixed("None: THD has no mask"),
        "packed_seq_params": wired("cu_seqlens_padded (TE's partition)"),
        "pg_collection": wired("cp_size, cp_rank"),
    },
    "megatron.bridge.training.gpt_step._partition_packed_batch_for_cp": {
        "batch": not_wired("the packed-SFT step's CP partition of an offline-packed row "
                           "(the pre-packed form, expressible): not wired in this adapter, "
                           "which runs the VLM step's in-batch path"),
        "cp_size": not_wired("as batch"),
    },
    "megatron.bridge.data.datasets.packing_utils.create_packing_strategy": {
        "histogram": not_wired(_BIN),
        "pack_size": not_wired(_BIN),
        "packing_algorithm": not_wired(_BIN + " (first_fit_decreasing, first_fit_shuffle)"),
    },
    "megatron.bridge.data.datasets.packing_utils.fill_packing_strategy": {
        "assignments": not_wired(_BIN),
        "sequences": not_wired(_BIN),
        "pack_size": not_wired(_BIN),
        "pad_id": not_wired(_BIN + " (the offline pack's pad id)"),
    },
}


def thd_get_partitioned_indices(cu_seqlens_padded: torch.Tensor, total: int, cp: int,
                                rank: int) -> torch.Tensor:
    """Glue for TE's `transformer_engine_torch.thd_get_partitioned_indices`, as documented:
    rank `rank` holds chunk `rank` and chunk `2cp-1-rank` of every segment."""
    cu = [int(x) for x in cu_seqlens_padded.tolist()]
    out: list[int] = []
    for start, end in zip(cu[:-1], cu[1:], strict=True):
        if (end - start) % (2 * cp):
            raise AssertionError(f"TE: segment of {end - start} rows not divisible by 2*cp")
        chunk = (end - start) // (2 * cp)
        for c in (rank, 2 * cp - 1 - rank):
            out.extend(range(start + c * chunk, start + (c + 1) * chunk))
    return torch.tensor(out, dtype=torch.int64)


def _signed_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool and (
        torch.iinfo(dtype).min < 0)


def right_padded_batch(seqs: list[np.ndarray]) -> dict[str, torch.Tensor]:
    """Glue: the collated batch Bridge's `get_batch` receives (tokens padded with 0)."""
    width = max((s.shape[0] for s in seqs), default=0)
    dtype = torch.from_numpy(np.asarray(seqs[0])).dtype
    tokens = torch.zeros(len(seqs), width, dtype=dtype)
    # labels are token ids: given in the batch's dtype where it is a signed integer (one that
    # holds -100), else not at all
    label_dtype = dtype if _signed_int(dtype) else torch.int64
    labels = torch.full((len(seqs), width), IGNORE_INDEX, dtype=label_dtype)
    loss_mask = torch.zeros(len(seqs), width, dtype=torch.float32)
    for i, s in enumerate(seqs):
        t = torch.from_numpy(np.ascontiguousarray(s))
        tokens[i, : t.shape[0]] = t
        if t.shape[0] > 1:
            labels[i, : t.shape[0] - 1] = t[1:].to(label_dtype)
            loss_mask[i, : t.shape[0] - 1] = 1.0
    position_ids = torch.arange(width, dtype=torch.int64).expand(len(seqs), width).clone()
    return {"tokens": tokens, "labels": labels, "loss_mask": loss_mask,
            "position_ids": position_ids}


class MegatronBridgeTarget:
    """Adapter over Bridge's pack_batch_sequences -> PackedSeqParams -> CP slice."""

    name = "megatron-bridge"
    declared = Declared(
        lacks=frozenset({"tensor_parallel", "contiguous", "trailing_dims", "zero_length"}),
        convention={"seq_align": "cp"},
        validated_elsewhere=frozenset({"config", "parallel_state", "batch"}),
        max_rows=1 << 20,
    )

    def __init__(self) -> None:
        vlm_path, self.version = _wheel.locate(DIST, VLM_STEP, _HINT)
        params_path, _ = _wheel.locate(DIST, PACKED_PARAMS, _HINT)
        common_path, _ = _wheel.locate(DIST, COMMON, _HINT)
        ns: dict[str, Any] = {"torch": torch, "logger": logging.getLogger("megatron-bridge")}
        self.pack_batch_sequences = _wheel.load_function(vlm_path, "pack_batch_sequences", ns)
        params = _wheel.exec_file(params_path, "_thd_conformance_bridge_params", {})
        self.get_packed_seq_params = params.get_packed_seq_params
        self.slice_for_cp = _wheel.load_function(
            common_path, "slice_batch_for_context_parallel", {"torch": torch})
        self.description = (f"megatron-bridge {self.version} vlm_step.pack_batch_sequences, "
                            "get_packed_seq_params, slice_batch_for_context_parallel "
                            "(TE's partition as glue)")

    def _declined(self, config: Config, need_roll: Any, pad_value: Any, seqs: Any) -> None:
        if need_roll:
            raise NotDeclared("Bridge's labels come beside the rows, from the dataset")
        if not (type(pad_value) is int and pad_value == 0):
            raise NotDeclared("Bridge pads tokens with pad_token_id=0")
        for key in ("fp8", "bucket", "min_local_rows"):
            if config.get(key) not in (None, False):
                raise NotDeclared(f"{key}: Bridge's in-batch packing has none")
        for key, default in (("tail", "last"), ("seq_align", "cp"), ("max_num_seqs", None),
                             ("max_seqlen", "exact")):
            if config.get(key, default) != default:
                raise NotDeclared(f"{key}={config[key]!r}: not Bridge's packing")
        if int(config.get("tp_size", 1)) != 1:
            raise NotDeclared("no tensor-parallel padding on this path")
        if int(config.get("cp_size", 1)) > 1 and config.get("cp_layout", "zigzag") != "zigzag":
            raise NotDeclared("TE's THD partition is zigzag")
        if any(np.asarray(s).ndim != 1 for s in seqs):
            raise NotDeclared("Bridge packs token ids [B, S]")

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        self._declined(config, need_roll, pad_value, seqs)
        cp = int(config.get("cp_size", 1))
        batch = right_padded_batch(list(seqs))
        tokens, labels, loss_mask, _, position_ids, cu_seqlens, max_seqlen = (
            self.pack_batch_sequences(
                tokens=batch["tokens"], labels=batch["labels"], loss_mask=batch["loss_mask"],
                attention_mask=None, position_ids=batch["position_ids"], pad_token_id=0,
                pad_to_multiple_of=cp * 2 if cp > 1 else 1))
        # forward_step (vlm_step.py:398-406): the argmin is the entry count, no padding there.
        params = self.get_packed_seq_params({
            "cu_seqlens": cu_seqlens, "max_seqlen": max_seqlen,
            "cu_seqlens_argmin": torch.tensor(len(cu_seqlens))})
        group = types.SimpleNamespace(cp=types.SimpleNamespace(
            size=lambda: cp, rank=lambda: int(cp_rank)))
        tex = _wheel.stub_module("transformer_engine_torch", {
            "thd_get_partitioned_indices": thd_get_partitioned_indices})
        saved = sys.modules.get("transformer_engine_torch")
        sys.modules["transformer_engine_torch"] = tex
        try:
            embeds, labels, loss_mask, position_ids, _ = self.slice_for_cp(
                tokens.transpose(0, 1), labels, loss_mask, position_ids, None, params, group)
        finally:
            if saved is None:
                sys.modules.pop("transformer_engine_torch", None)
            else:
                sys.modules["transformer_engine_torch"] = saved
        cu_padded = params.cu_seqlens_q.numpy()
        total = int(cu_padded[-1])
        rows = embeds.transpose(0, 1)[0]
        meta: Meta = {
            "cu_seqlens_padded": cu_padded,
            "seqlens_padded": np.diff(cu_padded),
            "max_seqlen": int(params.max_seqlen_q),
            "total": total,
            "local_rows": int(rows.shape[0]),
        }
        if not _signed_int(rows.dtype):  # token ids only: no labels for other dtypes
            return Packed(rows.numpy(), position_ids[0].numpy(), meta)
        return Packed(rows.numpy(), position_ids[0].numpy(), meta,
                      labels=labels[0].numpy(), loss_mask=loss_mask[0].numpy() != 0)


TARGET = MegatronBridgeTarget
