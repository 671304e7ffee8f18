"""The `areal` target: AReaL 1.0.4's Megatron packing path, from its wheel.

AReaL's `amend_position_ids`, `pack_tensor_dict`, `pad_mb_list` (data.py, each compiled alone)
and `preprocess_packed_seqs_context_parallel` (its file run with stubs), called as the Megatron
engine calls them. `cu_seqlens_padded` is the padded micro-batch's `cu_seqlens`; position ids
only at cp = 1. Declared: `tail="segment"` and a bucket of 256 rows (AReaL's page size).
Mapping, verdict and findings: docs/findings/areal.md.
"""

from __future__ import annotations

import ast
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from thd_packing.conformance.protocol import Config, Declared, Meta, NotDeclared, Packed

from . import _wheel

EXPECTED_VERSION = "1.0.4"
DATA_PATH = "areal/utils/data.py"
MATH_PATH = "areal/utils/math.py"
CP_PATH = "areal/engine/megatron_utils/packed_context_parallel.py"
_HINT = f"`nox -s conformance -- --target areal` installs areal=={EXPECTED_VERSION} --no-deps"


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
        mathns: dict[str, Any] = {}
        _wheel.load_function(math_path, "ceil_div", mathns)
        align = _wheel.load_function(math_path, "align", mathns)
        ns: dict[str, Any] = {
            "torch": torch, "F": F, "np": np, "align": align, "logger": _logger(),
            "N_TOKENS_PER_PAGE": self.page,
            "DEFAULT_MAX_TOKENS_PER_MB": module_constant(data_path, "DEFAULT_MAX_TOKENS_PER_MB"),
        }
        for fn in ("amend_position_ids", "pack_tensor_dict", "pad_packed_tensor_dict",
                   "pad_mb_list"):
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

    @staticmethod
    def seq_align_to(tp: int, cp: int) -> int:
        """Glue: the engine's alignment argument (megatron_engine.py:2081)."""
        return tp * cp * 2 if cp > 1 else tp

    def _declined(self, config: Config, need_roll: Any, pad_value: Any, seqs: Any) -> None:
        if need_roll:
            raise NotDeclared("AReaL's labels are torch.roll of the padded ids")
        if not (type(pad_value) is int and pad_value == 0):
            raise NotDeclared("AReaL's Megatron engine pads with 0.0")
        for key in ("fp8", "min_local_rows"):
            if config.get(key) not in (None, False):
                raise NotDeclared(f"{key}: not wired in this adapter")
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

    @staticmethod
    def padded_batch(seqs: list[np.ndarray]) -> dict[str, torch.Tensor]:
        """Glue: AReaL's rollout batch, right-padded ids and a bool attention mask [B, S]."""
        width = max((s.shape[0] for s in seqs), default=0)
        dtype = torch.from_numpy(np.asarray(seqs[0])).dtype
        ids = torch.zeros(len(seqs), width, dtype=dtype)
        mask = torch.zeros(len(seqs), width, dtype=torch.bool)
        for i, s in enumerate(seqs):
            ids[i, : s.shape[0]] = torch.from_numpy(np.ascontiguousarray(s))
            mask[i, : s.shape[0]] = True
        return {"input_ids": ids, "attention_mask": mask}

    def micro_batch(self, seqs: list[np.ndarray], tp: int, cp: int) -> Any:
        """AReaL's own calls up to the padded micro-batch (megatron_engine.py:2052-2091)."""
        data = self.fns["amend_position_ids"](self.padded_batch(seqs))
        mb = self.fns["pack_tensor_dict"](data)
        mb_list = types.SimpleNamespace(  # glue: one micro-batch, max_tokens_per_mb unset
            mbs=[mb], group_lens=[int(mb["cu_seqlens"][-1])],
            mb_spec=types.SimpleNamespace(max_tokens_per_mb=None))
        return self.fns["pad_mb_list"](mb_list, pad_value=0.0, pad_to_maximum=False,
                                       seq_align_to=self.seq_align_to(tp, cp))

    def pack(self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        self._declined(config, need_roll, pad_value, seqs)
        tp, cp = int(config.get("tp_size", 1)), int(config.get("cp_size", 1))
        mb_list = self.micro_batch(list(seqs), tp, cp)
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
