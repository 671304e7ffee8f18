"""The `verl-fsdp` target: verl 0.9.1's FSDP/VeOmni packed path (verl PR #7272).

verl's `pad_packed_inputs` (the bucket pad), `utils/ulysses.py` (Ulysses SP pad and contiguous
slice) and two `FSDPEngine` methods, from the wheel, around glue mirroring
`prepare_model_inputs`. Ulysses SP is `cp_layout="contiguous"`; `cu_seqlens_padded` is the
segments verl's attention derives from the position ids (no real `cu_seqlens`).
Mapping, verdict and findings: docs/findings/verl-fsdp.md.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.protocol import (
    CONVENTION_VALUES,
    Config,
    Declared,
    Meta,
    NotDeclared,
    Packed,
)

from . import _wheel
from ._wiring import fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "0.9.1"
DIST = "verl"
UTILS_PATH = "verl/workers/engine/utils.py"
ULYSSES_PATH = "verl/utils/ulysses.py"
ENGINE_PATH = "verl/workers/engine/fsdp/transformer_impl.py"
BALANCING_PATH = "verl/utils/seqlen_balancing.py"
_HINT = f"`nox -s conformance -- --target verl-fsdp` installs verl=={EXPECTED_VERSION} --no-deps"
_BIN = ("the bin step (rearrange_micro_batches' balanced micro-batches): no protocol key "
        "yet; needs the spec's bin rules in the protocol")
_ENGINE = "verl.workers.engine.fsdp.transformer_impl.FSDPEngine"
WIRING = {
    "verl.workers.engine.utils.pad_packed_inputs": {
        "input_ids_rmpad": wired("seqs (the nested batch's values)"),
        "position_ids_rmpad": wired("the nested positions' values"),
        "pad_size": wired("bucket (through _get_packed_pad_size)"),
        "pad_value": wired("pad_value"),
    },
    f"{_ENGINE}._get_packed_pad_size": {
        "packed_length": wired("the packed row's length; the bucket from "
                               "self.pad_to_length_bucket"),
    },
    f"{_ENGINE}._gather_and_unpad_packed": {
        "tensor": wired("unpack: the shards"),
        "pad_size": wired("unpack: total - sum(seqlens)"),
    },
    "verl.utils.ulysses.ulysses_pad": {
        "input_ids_rmpad": wired("the packed row"),
        "position_ids_rmpad": wired("the packed position ids"),
        "sp_size": wired("cp_size (contiguous)"),
        "pad_value": wired("pad_value"),
    },
    "verl.utils.ulysses.ulysses_pad_and_slice_inputs": {
        "input_ids_rmpad": wired("the packed row"),
        "position_ids_rmpad": wired("the packed position ids"),
        "sp_size": wired("cp_size (contiguous), cp_rank"),
        "skip_position_ids_rmpad": fixed("False: the position ids are sliced with the rows"),
        "pad_value": wired("pad_value"),
    },
    "verl.utils.ulysses.gather_outputs_and_unpad": {
        "x": wired("unpack: the shards"),
        "gather_dim": fixed("the sequence dim, from _gather_and_unpad_packed"),
        "unpad_dim": fixed("the sequence dim, from _gather_and_unpad_packed"),
        "padding_size": wired("unpack: the Ulysses pad"),
        "grad_scaler": no_effect("scales gradients, not values"),
        "group": wired("cp_size"),
    },
    "verl.utils.seqlen_balancing.rearrange_micro_batches": {
        "batch": not_wired(_BIN),
        "max_token_len": not_wired(_BIN),
        "dp_group": not_wired(_BIN),
        "num_batches_divided_by": not_wired(_BIN),
        "same_micro_num_in_dp": not_wired(_BIN),
        "min_num_micro_batch": not_wired(_BIN),
        "use_dynamic_bsz_balance": not_wired(_BIN),
        "force_group_size": not_wired(_BIN),
    },
}


def _utils_stubs() -> dict[str, types.ModuleType]:
    """Stand-ins for engine/utils.py's imports; none of them is reached by pad_packed_inputs."""
    s = _wheel.stub_module
    tu = s("verl.utils.tensordict_utils", callables=("get_non_tensor_data", "chunk_tensordict"))
    return {
        "tensordict": s("tensordict", {"TensorDict": type("TensorDict", (), {})}),
        "verl": s("verl", package=True),
        "verl.utils": s("verl.utils", {"tensordict_utils": tu}, package=True),
        "verl.utils.tensordict_utils": tu,
        "verl.utils.dataset": s("verl.utils.dataset", package=True),
        "verl.utils.dataset.dataset_utils": s(
            "verl.utils.dataset.dataset_utils",
            {"DatasetPadMode": type("DatasetPadMode", (), {"NO_PADDING": "no_padding"})}),
        "verl.utils.device": s("verl.utils.device", {"is_npu_available": False},
                               callables=("manual_seed", "manual_seed_all")),
        "verl.utils.py_functional": s("verl.utils.py_functional", callables=("append_to_dict",)),
        "verl.utils.seqlen_balancing": s(
            "verl.utils.seqlen_balancing",
            callables=("rearrange_micro_batches", "restore_dynamic_batch")),
    }


class FakeSPDist:
    """The `torch.distributed` calls of ulysses.py for one SP rank in this process: world size,
    rank, and an all_gather answered with every rank's shard (held by the suite)."""

    def __init__(self, world: int, rank: int, shards: list[torch.Tensor] | None = None) -> None:
        self.world, self.rank, self.shards = world, rank, shards

    def get_world_size(self, group: Any = None) -> int:
        return self.world

    def get_rank(self, group: Any = None) -> int:
        return self.rank

    def all_gather_into_tensor(self, output: torch.Tensor, local: torch.Tensor,
                               group: Any = None, async_op: bool = False) -> None:
        if self.shards is None:
            raise RuntimeError("no shards to gather: this FakeSPDist serves packing only")
        output.copy_(torch.cat(self.shards, dim=0))


_SP_GROUP = object()  # the Ulysses group handle: only compared with None by ulysses.py


def segments_from_position_ids(position_ids: np.ndarray) -> np.ndarray:
    """cu_seqlens as verl's FSDP attention derives it: starts where the position id is 0, plus
    the total (prepare_fa2_from_position_ids). A buffer of 0 rows has no segment: [0]."""
    pos = np.asarray(position_ids).reshape(-1)
    starts = np.flatnonzero(pos == 0)
    return np.concatenate([starts, [pos.size]]).astype(np.int32)


class VerlFsdpTarget:
    """Adapter over verl 0.9.1's FSDP/VeOmni packed-input padding (flat stream, Ulysses SP)."""

    name = "verl-fsdp"

    def __init__(self) -> None:
        utils_path, self.version = _wheel.locate(DIST, UTILS_PATH, _HINT)
        ulysses_path, _ = _wheel.locate(DIST, ULYSSES_PATH, _HINT)
        self.utils = _wheel.exec_file(utils_path, "_thd_conformance_verl_engine_utils",
                                      _utils_stubs())
        self.ulysses = _wheel.exec_file(ulysses_path, "_thd_conformance_verl_ulysses", {})
        # Feature probes: each piece of PR #7272 the target uses must be in this wheel.
        for module, attr in ((self.utils, "pad_packed_inputs"), (self.ulysses, "ulysses_pad"),
                             (self.ulysses, "ulysses_pad_and_slice_inputs"),
                             (self.ulysses, "gather_outputs_and_unpad")):
            if not hasattr(module, attr):
                raise RuntimeError(f"verl {self.version} has no {module.__name__}.{attr}")
        self.get_packed_pad_size: Any = None
        self.gather_and_unpad: Any = None
        features = {"pad_value"}
        try:
            engine_path, _ = _wheel.locate(DIST, ENGINE_PATH, _HINT)
            balancing_path, _ = _wheel.locate(DIST, BALANCING_PATH, _HINT)
            owner = _wheel.find_method_owner(engine_path, "_get_packed_pad_size")
            ns: dict[str, Any] = {"torch": torch}
            ns["ceildiv"] = _wheel.load_function(balancing_path, "ceildiv", {})
            self.get_packed_pad_size = _wheel.load_function(
                engine_path, "_get_packed_pad_size", ns, owner)
            features.add("bucket")
        except (RuntimeError, LookupError):
            pass  # this verl has no packed bucket pad
        try:
            engine_path, _ = _wheel.locate(DIST, ENGINE_PATH, _HINT)
            owner = _wheel.find_method_owner(engine_path, "_gather_and_unpad_packed")
            self.gather_and_unpad = _wheel.load_function(
                engine_path, "_gather_and_unpad_packed",
                {"gather_outputs_and_unpad": self.ulysses.gather_outputs_and_unpad}, owner)
        except (RuntimeError, LookupError):
            self.unpack = None  # type: ignore[method-assign,assignment]  # no such method here
        # Spec 1.1: pad_packed_inputs appends the total padding as its own segment whose
        # position ids restart at 0 (R-TAIL-1, R-TAIL-2); spec 1.2: no sequence is aligned,
        # Ulysses slices the pack (seq_align='none', R-ALIGN-6). No tensor parallelism (FSDP),
        # and CP is Ulysses SP: contiguous slices. No FP8, minimum rows or labels in the rows (the
        # engine rolls them in a separate tensor); segments are derived from position ids, so
        # a zero-length sequence cannot show, and rows are (1, total) ids: no trailing dims.
        # The SP size and rank come from torch.distributed, the batch is a nested tensor, the
        # shards come from an all_gather. max_rows: the glue builds every row it is asked for.
        self.declared = Declared(
            features=frozenset(features),
            lacks=frozenset({"tensor_parallel", "zigzag", "zero_length", "trailing_dims"}),
            convention={"tail": "segment", "seq_align": "none"},
            validated_elsewhere=frozenset({"config", "parallel_state", "batch", "unpack"}),
            max_rows=1 << 20)
        self.description = (
            f"verl {self.version} FSDP packed path: engine/utils.py pad_packed_inputs, "
            "utils/ulysses.py (standalone), FSDPEngine._get_packed_pad_size and "
            "_gather_and_unpad_packed (definitions only); cp = Ulysses SP (contiguous), "
            "segments derived from position ids == 0"
        )

    # -- the protocol -------------------------------------------------------------------------

    def _declined(self, config: Config, need_roll: Any, seqs: Any) -> None:
        cfg = {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False,
               "bucket": None, "min_local_rows": None, **config}
        if need_roll:
            raise NotDeclared("the FSDP engine keeps labels in a separate tensor")
        tail = config.get("tail", "segment")
        if tail not in CONVENTION_VALUES["tail"]:
            raise ValueError(f"tail must be 'segment' (the adapter's convention), got {tail!r}")
        if tail != "segment":
            raise NotDeclared("pad_packed_inputs appends the padding as its own segment "
                              "(tail='segment' only)")
        for key, default in (("seq_align", "none"), ("max_num_seqs", None),
                             ("max_seqlen", "exact"), ("fixed_total", None)):
            if config.get(key, default) != default:
                raise NotDeclared(f"{key}={config[key]!r}: not verl's FSDP packing")
        if cfg["fp8"]:
            raise NotDeclared("verl's FSDP packed path has no FP8 padding")
        if cfg["min_local_rows"] is not None:
            raise NotDeclared("verl's FSDP packed path has no minimum rows")
        if cfg["tp_size"] != 1:
            raise NotDeclared("verl's FSDP engine has no tensor parallelism (tp_size 1)")
        if cfg["cp_size"] != 1 and cfg["cp_layout"] != "contiguous":
            raise NotDeclared(
                "Ulysses SP slices the packed row contiguously: no zigzag CP sharding")
        if cfg["bucket"] is not None and self.get_packed_pad_size is None:
            raise NotDeclared("this verl has no packed bucket pad")
        if isinstance(seqs, list | tuple):
            for s in seqs:
                if isinstance(s, np.ndarray) and s.ndim != 1:
                    raise NotDeclared("rows are (1, total) ids: no trailing dims")
                if isinstance(s, np.ndarray) and s.shape[0] == 0:
                    raise NotDeclared("a zero-length sequence has no position id")

    def _packed_row(self, seqs: list[np.ndarray], config: Config,
                    pad_value: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """prepare_model_inputs up to the SP split: values of the nested batch, then the bucket."""
        nested = torch.nested.nested_tensor(
            [torch.from_numpy(np.ascontiguousarray(s)) for s in seqs], layout=torch.jagged)
        positions = torch.nested.nested_tensor(
            [torch.arange(s.shape[0], dtype=torch.int64) for s in seqs], layout=torch.jagged)
        ids, pos = nested.values().unsqueeze(0), positions.values().unsqueeze(0)
        bucket = config.get("bucket")
        if bucket is not None:
            engine = types.SimpleNamespace(pad_to_length=True, pad_to_length_bucket=bucket)
            static_pad = self.get_packed_pad_size(engine, ids.size(-1))
            if static_pad:
                ids, pos = self.utils.pad_packed_inputs(ids, pos, static_pad,
                                                        pad_value=pad_value)
        return ids, pos

    def _sp(self, world: int, rank: int, shards: list[torch.Tensor] | None = None) -> None:
        self.ulysses.dist = FakeSPDist(world, rank, shards)  # type: ignore[attr-defined]
        group = _SP_GROUP if world > 1 else None
        self.ulysses._ULYSSES_SEQUENCE_PARALLEL_GROUP = group  # type: ignore[attr-defined]

    def pack(
        self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
        pad_value: Any = 0,
    ) -> Packed:
        self._declined(config, need_roll, seqs)
        ids, pos = self._packed_row(seqs, config, pad_value)
        sp = int(config.get("cp_size", 1))
        if sp > 1:
            self._sp(sp, cp_rank)
            g_ids, g_pos, _ = self.ulysses.ulysses_pad(ids, pos, sp_size=sp, pad_value=pad_value)
            ids, pos, _ = self.ulysses.ulysses_pad_and_slice_inputs(
                ids, pos, sp_size=sp, pad_value=pad_value)
        else:
            g_ids, g_pos = ids, pos
        cu_padded = segments_from_position_ids(g_pos.numpy())
        lengths = np.asarray([s.shape[0] for s in seqs], dtype=np.int32)
        total = int(g_ids.shape[-1])
        # Real lengths per derived segment: the B sequences', then 0 for each padding segment
        # (the nested offsets verl keeps for the unpack hold the B lengths).
        per_segment = np.zeros(max(cu_padded.size - 1, lengths.size), dtype=np.int32)
        per_segment[:lengths.size] = lengths
        meta: Meta = {
            "seqlens": per_segment,
            "num_seqs": int(lengths.size),
            "seqlens_padded": np.diff(cu_padded).astype(np.int32),
            "cu_seqlens_padded": cu_padded,
            "max_seqlen": int(np.diff(cu_padded).max()) if cu_padded.size > 1 else 0,
            "total": total,
            "local_rows": int(ids.shape[-1]),
        }
        return Packed(ids[0].numpy(), pos[0].numpy(), meta)

    def unpack(self, shards: list[np.ndarray], meta: Meta, config: Config) -> list[np.ndarray]:
        """The engine's output path: gather and strip the total pad, then split by the offsets."""
        tensors = [torch.from_numpy(np.ascontiguousarray(s)) for s in shards]
        sp = len(tensors)
        b = int(meta.get("num_seqs", np.asarray(meta["seqlens"]).size))
        lengths = [int(x) for x in np.asarray(meta["seqlens"])[:b]]
        pad_size = int(meta["total"]) - sum(lengths)  # output_args["pad_size"]
        self._sp(sp, 0, tensors)
        engine = types.SimpleNamespace(use_ulysses_sp=sp > 1)
        values = self.gather_and_unpad(engine, tensors[0], pad_size)
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int64)
        out = torch.nested.nested_tensor_from_jagged(values, offsets)
        return [t.numpy() for t in out.unbind()]


TARGET = VerlFsdpTarget
