"""The `verl` target: upstream verl 0.9.1's `preprocess_thd_engine` / `postprocess_thd_engine`.

`verl/models/mcore/util.py` is loaded on its own from the installed wheel's files, without
executing verl's package `__init__` (which pulls in a whole training stack). During that one
import, stub modules stand in for `verl`, `verl.utils.device` (`is_npu_available = False`) and
`verl.utils.model`; they are removed again afterwards. Megatron's parallel state is replaced,
inside the loaded module only, by a fake that reports the tp/cp sizes and the rank under test.
The real megatron-core's `PackedSeqParams` is used, so its feature set decides what verl can do
(`cp_partition_mode`, needed for the contiguous layout, is probed and becomes a capability).
"""

from __future__ import annotations

import logging
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.protocol import Config, Declared, Meta, NotDeclared, Packed
from thd_packing.conformance.targets._megatron_view import (
    KwargsParams,
    params_dict,
    thd_params,
    unpack_with_grad,
)

from . import _wheel
from ._wiring import fixed, not_wired, wired

EXPECTED_VERSION = "0.9.1"
UTIL_PATH = "verl/models/mcore/util.py"
_STUBS = ("verl", "verl.utils", "verl.utils.device", "verl.utils.model")
_BIN = ("the bin step (rearrange_micro_batches' balanced micro-batches): no protocol key "
        "yet; needs the spec's bin rules in the protocol")
_UTIL = "verl.models.mcore.util"
_DYNAMIC_CP = not_wired(
    "dynamic context parallelism: a cp size per batch from Megatron's dynamic groups "
    "(verl raises NotImplementedError on the engine path); needs a per-batch cp rule")
WIRING = {
    f"{_UTIL}.preprocess_thd_engine": {
        "input_ids": wired("seqs (a jagged nested tensor)"),
        "pre_process": fixed("True: the first pipeline stage builds the rows"),
        "need_roll": wired("need_roll"),
        "use_fp8_padding": wired("fp8"),
        "local_cp_size": _DYNAMIC_CP,
        "min_local_rows": wired("min_local_rows"),
        "pad_to_length_bucket": wired("bucket"),
        "cp_layout": wired("cp_layout"),
    },
    f"{_UTIL}.postprocess_thd_engine": {
        "output": wired("unpack: the shards (and distributed_unpack)"),
        "packed_seq_params": wired("unpack: cu_seqlens_padded"),
        "input_ids": wired("unpack: the nested offsets (seqlens)"),
        "batch_size": wired("unpack: B"),
        "post_process": fixed("True: the last pipeline stage unpacks"),
        "local_cp_size": _DYNAMIC_CP,
        "cp_layout": wired("cp_layout"),
    },
    f"{_UTIL}.preprocess_packed_seqs": {
        "input_ids": wired("packed_preprocess: values [B, S, *trail]"),
        "attention_mask": wired("packed_preprocess: the mask"),
        "pre_process": fixed("True: the first pipeline stage builds the rows"),
        "use_fp8_padding": wired("fp8"),
    },
    f"{_UTIL}.postprocess_packed_seqs": {
        "output": wired("packed_gathered / packed_distributed: the shards"),
        "packed_seq_params": wired("cu_seqlens_padded"),
        "attention_mask": wired("the mask"),
        "batch_size": wired("B"),
        "seq_len": wired("S"),
        "post_process": fixed("True: the last pipeline stage unpacks"),
    },
    "verl.utils.dynamic_cp_scheduler.DynamicCPScheduler": {
        "max_seqlen_per_dp_cp_rank": _DYNAMIC_CP,
        "dp_size": _DYNAMIC_CP,
        "cp_size": _DYNAMIC_CP,
    },
    "verl.utils.dynamic_cp_scheduler.DynamicCPScheduler.schedule": {
        "batch": not_wired(_BIN + "; with a cp size per micro-batch (dynamic CP)"),
        "dcp_group": _DYNAMIC_CP,
        "tp_size": _DYNAMIC_CP,
        "cp_layout": _DYNAMIC_CP,
        "min_local_rows": _DYNAMIC_CP,
    },
    "verl.utils.seqlen_balancing.rearrange_micro_batches": {
        "batch": not_wired(_BIN),
        "max_token_len": not_wired(_BIN),
        "dp_group": not_wired(_BIN + " (the count agreed over data parallelism)"),
        "num_batches_divided_by": not_wired(_BIN),
        "same_micro_num_in_dp": not_wired(_BIN),
        "min_num_micro_batch": not_wired(_BIN),
        "use_dynamic_bsz_balance": not_wired(_BIN),
        "force_group_size": not_wired(_BIN),
    },
}


class FakeParallelState:
    """The four megatron.core.parallel_state getters that verl's THD code reads."""

    def __init__(self, tp: int, cp: int, rank: int, group: Any = None) -> None:
        self.tp, self.cp, self.rank, self.group = tp, cp, rank, group

    def get_tensor_model_parallel_world_size(self) -> int:
        return self.tp

    def get_context_parallel_world_size(self) -> int:
        return self.cp

    def get_context_parallel_rank(self) -> int:
        return self.rank

    def get_context_parallel_group(self) -> Any:
        return self.group


class _OnceLogger:
    """verl calls `logger.warning_once`, which transformers patches onto `logging.Logger` in a
    real verl process; standalone we supply it (a no-op) so that the packing code can run."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


class _TorchWithLocalGather:
    """`torch` as seen by verl's postprocess in a single process: `torch.distributed.all_gather`
    copies the shards the suite already holds (every other attribute is the real torch)."""

    def __init__(self, shards: list[torch.Tensor]) -> None:
        shards_ = shards

        def all_gather(output_list: list[torch.Tensor], tensor: torch.Tensor,
                       group: Any = None) -> None:
            for out, shard in zip(output_list, shards_, strict=True):
                out.copy_(shard[None])

        self.distributed = types.SimpleNamespace(all_gather=all_gather)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def _locate_util() -> tuple[Path, str]:
    return _wheel.locate("verl", UTIL_PATH, "`nox -s conformance -- --target verl` installs "
                         f"verl=={EXPECTED_VERSION} with --no-deps")


def load_util(packed_seq_params: Any = None) -> types.ModuleType:
    """Execute util.py alone under a private module name, with stubs for verl's own imports.

    `packed_seq_params`: a class that verl's module takes as megatron-core's `PackedSeqParams`
    (verl probes its constructor once, at import), e.g. a test stub with a `**kwargs`
    constructor; None keeps the installed megatron-core's.
    """
    path, _ = _locate_util()
    stubs = {name: types.ModuleType(name) for name in _STUBS}
    if packed_seq_params is not None:
        import megatron.core.packed_seq_params  # noqa: F401 - the real package first

        name = "megatron.core.packed_seq_params"
        stubs[name] = _wheel.stub_module(name, {"PackedSeqParams": packed_seq_params})
    stubs["verl"].__path__ = []
    stubs["verl.utils"].__path__ = []
    stubs["verl.utils.device"].is_npu_available = False  # type: ignore[attr-defined]
    stubs["verl.utils.model"].CausalLMOutputForPPO = type(  # type: ignore[attr-defined]
        "CausalLMOutputForPPO", (), {}
    )
    module = _wheel.exec_file(path, "_thd_conformance_verl_util", stubs)
    module.logger = _OnceLogger(module.logger)  # type: ignore[attr-defined]
    return module


class VerlTarget:
    """Adapter over verl 0.9.1's Megatron THD engine helpers (nested jagged tensors in)."""

    name = "verl"

    def __init__(self) -> None:
        self.util = load_util()
        self._kwargs_util: Any = None
        _, self.version = _locate_util()
        self.description = f"verl {self.version} verl/models/mcore/util.py (standalone)"
        # verl 0.9.1's preprocess_thd_engine takes pad_to_length_bucket, use_fp8_padding and
        # min_local_rows, and packs empty sequences and trailing dims (nested jagged tensors);
        # it always pads with zeros. The contiguous layout needs the installed megatron-core's
        # PackedSeqParams.cp_partition_mode (probed). Megatron's parallel state validates tp/cp
        # size and rank, all_gather the shards' shapes, and the nested tensor's constructor the
        # batch's dtypes and trailing shapes. cost 2: verl's per-sequence Python loops.
        self.declared = Declared(
            features=frozenset({"need_roll", "bucket", "fp8", "min_local_rows"}),
            lacks=frozenset() if self.util._PACKED_SEQ_PARAMS_HAS_CP_PARTITION_MODE
            else frozenset({"contiguous"}),
            validated_elsewhere=frozenset({"parallel_state", "unpack", "batch"}),
            cost=2.0)

    def _call_pre(
        self, seqs: list[np.ndarray], config: Config, cp_rank: int, need_roll: bool,
        util: Any = None,
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        cfg = {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False, "bucket": None,
               "min_local_rows": None, **config}
        # nested_tensor copies its parts; a writable copy keeps torch from warning about a
        # caller's read-only array
        nested = torch.nested.nested_tensor([torch.from_numpy(np.array(s)) for s in seqs],
                                            layout=torch.jagged)
        util = self.util if util is None else util
        util.mpu = FakeParallelState(cfg["tp_size"], cfg["cp_size"], cp_rank)
        # NumPy sizes (test_numpy_sizes) reach verl's arithmetic as NumPy scalars, which warn
        # on the overflow the suite judges by its results
        with np.errstate(over="ignore"):
            rows, params, pos = util.preprocess_thd_engine(
                nested, pre_process=True, need_roll=need_roll, use_fp8_padding=cfg["fp8"],
                local_cp_size=None, min_local_rows=cfg["min_local_rows"],
                pad_to_length_bucket=cfg["bucket"], cp_layout=cfg["cp_layout"],
            )
        return rows, params, pos

    def pack(
        self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
        pad_value: Any = 0,
    ) -> Packed:
        if pad_value != 0:
            raise NotDeclared("verl has no pad_value")
        rows, params, pos = self._call_pre(seqs, config, cp_rank, need_roll)
        cu_padded = params.cu_seqlens_q_padded.numpy()
        meta: Meta = {
            # verl keeps the real lengths only as the nested tensor's offsets (its input).
            "seqlens": np.asarray([s.shape[0] for s in seqs], dtype=np.int32),
            "seqlens_padded": np.diff(cu_padded),
            "cu_seqlens_padded": cu_padded,
            "max_seqlen": params.max_seqlen_q,
            "total": int(cu_padded[-1]),
            "local_rows": int(rows.shape[1]),
        }
        return Packed(rows[0].numpy(), pos[0].numpy(), meta)

    def megatron_preprocess(
        self, seqs: list[np.ndarray], config: Config, cp_rank: int, *, need_roll: bool = False
    ) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
        rows, params, pos = self._call_pre(seqs, config, cp_rank, need_roll)
        return rows.numpy(), params_dict(params), pos.numpy()

    def megatron_preprocess_kwargs(
        self, seqs: list[np.ndarray], config: Config, cp_rank: int, *, need_roll: bool = False
    ) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
        """Capability `kwargs_params`: util.py loaded a second time with a PackedSeqParams whose
        constructor takes `**kwargs` (verl probes it at import), so contiguous cp > 1 runs."""
        if self._kwargs_util is None:
            self._kwargs_util = load_util(KwargsParams)
        rows, params, pos = self._call_pre(seqs, config, cp_rank, need_roll, self._kwargs_util)
        return rows.numpy(), params_dict(params), pos.numpy()

    def packed_preprocess(self, values: np.ndarray, mask: np.ndarray, config: Config,
                          cp_rank: int) -> tuple[np.ndarray, dict[str, Any]]:
        """Capability `packed_seqs`: verl's preprocess_packed_seqs (zigzag, tp, cp, FP8)."""
        cfg = {"tp_size": 1, "cp_size": 1, "fp8": False, **config}
        self.util.mpu = FakeParallelState(  # type: ignore[attr-defined]
            cfg["tp_size"], cfg["cp_size"], cp_rank)
        rows, params = self.util.preprocess_packed_seqs(
            torch.from_numpy(np.ascontiguousarray(values)), torch.from_numpy(mask),
            use_fp8_padding=cfg["fp8"])
        return rows.numpy(), params_dict(params)

    def _packed_post(self, rows: np.ndarray, cu_padded: np.ndarray, mask: np.ndarray,
                     config: Config, cp_rank: int, group: Any
                     ) -> tuple[np.ndarray, np.ndarray | None]:
        meta = {"cu_seqlens_padded": cu_padded}
        params = thd_params(meta)
        m = torch.from_numpy(mask)

        def post(local: torch.Tensor) -> Any:
            self.util.mpu = FakeParallelState(  # type: ignore[attr-defined]
                config.get("tp_size", 1), config.get("cp_size", 1), cp_rank, group)
            return self.util.postprocess_packed_seqs(local, params, m, m.shape[0], m.shape[1])

        parts, grad = unpack_with_grad(rows, post)
        return np.stack(parts), grad

    def packed_gathered(self, shards: list[np.ndarray], cu_padded: np.ndarray,
                        mask: np.ndarray, config: Config, cp_rank: int
                        ) -> tuple[np.ndarray, np.ndarray | None]:
        """Capability `packed_seqs`: verl's postprocess_packed_seqs, its all_gather answered
        in process with every rank's rows."""
        tensors = [torch.from_numpy(np.ascontiguousarray(s)) for s in shards]
        real_torch = self.util.torch  # type: ignore[attr-defined]
        self.util.torch = _TorchWithLocalGather(tensors)  # type: ignore[attr-defined]
        try:
            return self._packed_post(shards[cp_rank], cu_padded, mask, config, cp_rank, None)
        finally:
            self.util.torch = real_torch  # type: ignore[attr-defined]

    def packed_distributed(self, rows: np.ndarray, cu_padded: np.ndarray, mask: np.ndarray,
                           config: Config, cp_rank: int, group: Any
                           ) -> tuple[np.ndarray, np.ndarray | None]:
        return self._packed_post(rows, cu_padded, mask, config, cp_rank, group)

    def _post(self, output: torch.Tensor, meta: Meta, config: Config, cp_rank: int,
              group: Any) -> Any:
        lengths = [int(x) for x in np.asarray(meta["seqlens"])]
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int64)
        params = thd_params(meta)
        self.util.mpu = FakeParallelState(  # type: ignore[attr-defined]
            config.get("tp_size", 1), config.get("cp_size", 1), cp_rank, group)
        return self.util.postprocess_thd_engine(
            output, params, types.SimpleNamespace(offsets=lambda: offsets), len(lengths),
            post_process=True, local_cp_size=None,
            cp_layout=config.get("cp_layout", "zigzag"),
        )

    def unpack(self, shards: list[np.ndarray], meta: Meta, config: Config) -> list[np.ndarray]:
        tensors = [torch.from_numpy(np.ascontiguousarray(s)) for s in shards]
        real_torch = self.util.torch  # type: ignore[attr-defined]
        self.util.torch = _TorchWithLocalGather(tensors)  # type: ignore[attr-defined]
        try:
            out = self._post(tensors[0][None], meta, config, 0, None)
        finally:
            self.util.torch = real_torch  # type: ignore[attr-defined]
        return [t.numpy() for t in out.unbind()]

    def distributed_unpack(
        self, rows: np.ndarray, meta: Meta, config: Config, cp_rank: int, group: Any
    ) -> tuple[list[np.ndarray], np.ndarray | None]:
        return unpack_with_grad(
            rows, lambda local: self._post(local, meta, config, cp_rank, group)
        )


TARGET = VerlTarget
