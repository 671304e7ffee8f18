"""The `areal` target: AReaL 1.0.4's Megatron packing path, from its wheel.

AReaL's `amend_position_ids`, `pack_tensor_dict`, `pad_mb_list` (data.py, each compiled alone)
and `preprocess_packed_seqs_context_parallel` (its file run with stubs), called as the Megatron
engine calls them. `cu_seqlens_padded` is the padded micro-batch's `cu_seqlens`; position ids
only at cp = 1. Declared: `tail="segment"` and a bucket of 256 rows (AReaL's page size); FP8 as
the engine aligns for it, each sequence to `lcm(seq_align_to, 16)`.
Mapping, verdict and findings: docs/findings/areal.md.
"""

from __future__ import annotations

import ast
import math
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from thd_packing.conformance.protocol import Config, Declared, Meta, NotDeclared, Packed

from . import _wheel
from ._wiring import fixed, not_wired, wired

EXPECTED_VERSION = "1.0.4"
DATA_PATH = "areal/utils/data.py"
MATH_PATH = "areal/utils/math.py"
CP_PATH = "areal/engine/megatron_utils/packed_context_parallel.py"
CONSTANTS_PATH = "areal/utils/constants.py"
_HINT = f"`nox -s conformance -- --target areal` installs areal=={EXPECTED_VERSION} --no-deps"
_CP = "areal.engine.megatron_utils.packed_context_parallel"
_BIN = ("the bin step (which sequences share a micro-batch): no protocol key yet; needs the "
        "spec's bin rules in the protocol")
_MASK = not_wired(
    "the padded-batch form (R-IN-7): pack_tensor_dict reads the first mask-sum rows of each "
    "row (AReaL's batches are right-padded); the mask form also draws left and scattered "
    "padding, and the protocol has no right-padded-only declaration; needs one")
WIRING = {
    "areal.utils.data.concat_padded_tensors": {
        "tensor_dicts": wired("seqs (each trajectory's ids and mask of ones, [1, L])"),
        "pad_value": not_wired("pad_value: the workflow executor's default 0.0; a token-id "
                               "packer's pad value needs the pad-value rejection tests "
                               "declinable"),
    },
    "areal.utils.data.amend_position_ids": {
        "data.attention_mask": _MASK,
    },
    "areal.utils.data.pack_tensor_dict": {
        "data.input_ids": wired("seqs (right-padded [B, S] by the glue)"),
        "data.attention_mask": _MASK,
    },
    "areal.utils.data.pad_mb_list": {
        "mb_list": wired("seqs (one micro-batch)"),
        "pad_value": not_wired("pad_value: the engine passes 0.0; a token-id packer's pad "
                               "value needs the pad-value rejection tests declinable"),
        "pad_to_maximum": not_wired(
            "pad to max_tokens_per_mb (fixed_total) instead of the page: fixed_total and the "
            "declared fixed page (convention bucket=256) are exclusive in one target; needs a "
            "second target or a per-draw convention"),
        "batch_align_to": not_wired(
            "the page rounded up again to a multiple (a bucket on top of the fixed page): "
            "needs a 'fixed page plus bucket' total rule (R-TOTAL-2)"),
        "seq_align_to": wired("tp_size, cp_size, fp8 (the engine's tp*cp*2, lcm with 16 "
                            "under FP8)"),
    },
    "areal.utils.data.pad_packed_tensor_dict": {
        "data": wired("seqs (through pad_mb_list)"),
        "pad_to_length": wired("the page (convention bucket=256), through pad_mb_list"),
        "pad_value": not_wired("as pad_mb_list's pad_value"),
        "seq_align_to": wired("tp_size, cp_size, fp8 (through pad_mb_list)"),
    },
    "areal.utils.data.split_padded_tensor_dict_into_mb_list": {
        "data": not_wired(_BIN),
        "mb_spec": not_wired(_BIN),
        "group": not_wired(_BIN + " (the micro-batch count agreed over data parallelism)"),
    },
    "areal.utils.seqpack.ffd_allocate": {
        "values": not_wired(_BIN),
        "capacity": not_wired(_BIN),
        "min_groups": not_wired(_BIN),
        "n_groups_divisor": not_wired(_BIN),
    },
    f"{_CP}.preprocess_packed_seqs_context_parallel": {
        "input_ids": wired("seqs (the padded micro-batch)"),
        "cu_seqlens": wired("the padded micro-batch's cu_seqlens (cu_seqlens_padded)"),
    },
    f"{_CP}.postprocess_packed_seqs_context_parallel": {
        "output": not_wired(
            "unpack (R-UNPACK-1): the gather, then unpad_logits with AReaL's old_cu_seqlens, "
            "whose B + 1 entries have none for the padding segment that the protocol's "
            "seqlens under tail='segment' holds; needs that convention declarable"),
        "cu_seqlens": not_wired("unpack, as output"),
        "post_process": fixed("True on the last pipeline stage"),
        "gather_output": not_wired("unpack, as output"),
    },
}


def module_constant(path: Path, name: str) -> Any:
    """The literal value a module-level `name = <expr>` of `path` evaluates to (the wheel's
    own constant, read without importing the file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name):
            return eval(compile(ast.Expression(node.value), str(path), "eval"), {"int": int})  # noqa: S307
    raise LookupError(f"{path} has no constant {name}")


class _ParallelState:
    """Glue: the three Megatron parallel-state queries the CP preprocess makes."""

    def __init__(self, tp: int, cp: int, rank: int) -> None:
        self.tp, self.cp, self.rank = tp, cp, rank

    def get_tensor_model_parallel_world_size(self) -> int:
        return self.tp

    def get_context_parallel_world_size(self) -> int:
        return self.cp

    def get_context_parallel_rank(self) -> int:
        return self.rank


def _logger() -> Any:
    return types.SimpleNamespace(warning=lambda *a, **k: None, info=lambda *a, **k: None)


class ArealTarget:
    """Adapter over AReaL's pack_tensor_dict -> pad_mb_list -> CP preprocess."""

    name = "areal"
    declared = Declared(
        features=frozenset({"fp8"}),
        lacks=frozenset({"trailing_dims", "contiguous"}),
        convention={"tail": "segment", "bucket": 256},
        validated_elsewhere=frozenset({"config", "parallel_state", "batch"}),
        max_rows=1 << 20,
    )

    def __init__(self) -> None:
        data_path, self.version = _wheel.locate("areal", DATA_PATH, _HINT)
        math_path, _ = _wheel.locate("areal", MATH_PATH, _HINT)
        cp_path, _ = _wheel.locate("areal", CP_PATH, _HINT)
        self.page = module_constant(data_path, "N_TOKENS_PER_PAGE")
        self.fp8_align = module_constant(_wheel.locate("areal", CONSTANTS_PATH, _HINT)[0],
                                         "DEFAULT_VECTORIZED_ALIGNMENT_BYTES")
        mathns: dict[str, Any] = {}
        _wheel.load_function(math_path, "ceil_div", mathns)
        align = _wheel.load_function(math_path, "align", mathns)
        ns: dict[str, Any] = {
            "torch": torch, "F": F, "np": np, "align": align, "logger": _logger(),
            "N_TOKENS_PER_PAGE": self.page,
            "DEFAULT_MAX_TOKENS_PER_MB": module_constant(data_path, "DEFAULT_MAX_TOKENS_PER_MB"),
        }
        for fn in ("is_multi_modal_key", "get_batch_size", "_pad_cat_dim0",
                   "concat_padded_tensors", "amend_position_ids", "pack_tensor_dict",
                   "pad_packed_tensor_dict", "pad_mb_list"):
            _wheel.load_function(data_path, fn, ns)
        self.fns = ns
        s = _wheel.stub_module
        self.cp_mod = _wheel.exec_file(cp_path, "_thd_conformance_areal_cp", {
            "areal": s("areal", package=True),
            "areal.utils": s("areal.utils", package=True),
            "areal.utils.data": s("areal.utils.data", callables=("is_multi_modal_key",)),
        })
        self.description = (
            f"areal {self.version} utils/data.py pack_tensor_dict + pad_mb_list, "
            "megatron_utils/packed_context_parallel.py preprocess (zigzag CP)"
        )

    def seq_align_to(self, tp: int, cp: int, fp8: bool = False) -> int:
        """Glue: the engine's alignment argument (megatron_engine.py:2081-2085), lcm with the
        wheel's DEFAULT_VECTORIZED_ALIGNMENT_BYTES (16) when FP8 is on."""
        align = tp * cp * 2 if cp > 1 else tp
        return math.lcm(align, self.fp8_align) if fp8 else align

    def _declined(self, config: Config, need_roll: Any, pad_value: Any, seqs: Any) -> None:
        if need_roll:
            raise NotDeclared("AReaL's labels are torch.roll of the padded ids")
        if not (type(pad_value) is int and pad_value == 0):
            raise NotDeclared("AReaL's Megatron engine pads with 0.0")
        if config.get("min_local_rows") is not None:
            raise NotDeclared("min_local_rows: AReaL has no minimum rows")
        if config.get("fp8", False) not in (False, True):
            raise NotDeclared("AReaL's FP8 alignment is one (16), no recipes")
        if config.get("bucket", self.page) != self.page:
            raise NotDeclared(f"AReaL always pads to its page of {self.page} rows")
        for key, default in (("tail", "segment"), ("seq_align", "tp_cp"),
                             ("max_num_seqs", None), ("max_seqlen", "exact")):
            if config.get(key, default) != default:
                raise NotDeclared(f"{key}={config[key]!r}: not AReaL's packing")
        if int(config.get("cp_size", 1)) > 1 and config.get("cp_layout", "zigzag") != "zigzag":
            raise NotDeclared("AReaL's CP split is zigzag")
        if any(np.asarray(s).ndim != 1 for s in seqs):
            raise NotDeclared("AReaL packs token ids [L]")

    def padded_batch(self, seqs: list[np.ndarray]) -> dict[str, torch.Tensor]:
        """AReaL's rollout batch: each trajectory as its workflows return it (ids and a bool
        attention mask of ones, each [1, L]; workflow/rlvr.py:170-178), right-padded and
        concatenated by its own concat_padded_tensors (data.py:241)."""
        trajectories = []
        for s in seqs:
            ids = torch.from_numpy(np.ascontiguousarray(s))[None]
            trajectories.append({"input_ids": ids,
                                 "attention_mask": torch.ones(ids.shape, dtype=torch.bool)})
        return dict(self.fns["concat_padded_tensors"](trajectories))

    def micro_batch(self, seqs: list[np.ndarray], tp: int, cp: int, fp8: bool = False) -> Any:
        """AReaL's own calls up to the padded micro-batch (megatron_engine.py:2052-2091)."""
        data = self.fns["amend_position_ids"](self.padded_batch(seqs))
        mb = self.fns["pack_tensor_dict"](data)
        mb_list = types.SimpleNamespace(  # glue: one micro-batch, max_tokens_per_mb unset
            mbs=[mb], group_lens=[int(mb["cu_seqlens"][-1])],
            mb_spec=types.SimpleNamespace(max_tokens_per_mb=None))
        return self.fns["pad_mb_list"](mb_list, pad_value=0.0, pad_to_maximum=False,
                                       seq_align_to=self.seq_align_to(tp, cp, fp8))

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        self._declined(config, need_roll, pad_value, seqs)
        tp, cp = int(config.get("tp_size", 1)), int(config.get("cp_size", 1))
        mb_list = self.micro_batch(list(seqs), tp, cp, config.get("fp8", False) is True)
        padded = mb_list.padded_mbs[0]
        self.cp_mod.mpu = _ParallelState(tp, cp, int(cp_rank))  # type: ignore[attr-defined]
        rows, params = self.cp_mod.preprocess_packed_seqs_context_parallel(
            padded["input_ids"], padded["cu_seqlens"])
        cu_padded = params.cu_seqlens_q_padded.numpy()
        total = int(cu_padded[-1])
        meta: Meta = {
            "cu_seqlens_padded": cu_padded,
            "seqlens_padded": np.diff(cu_padded),
            "max_seqlen": int(params.max_seqlen_q),
            "total": total,
            "local_rows": int(rows.shape[1]),
            "num_seqs": len(mb_list.old_cu_seqlens_list[0]) - 1,
        }
        position_ids = padded["position_ids"].numpy() if cp == 1 else None
        return Packed(rows[0].numpy(), position_ids, meta)


TARGET = ArealTarget
