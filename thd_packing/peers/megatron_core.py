"""The `megatron-core` target: megatron-core 0.16.1's THD sharder, `get_thd_batch_on_this_cp_rank`.

megatron-core's own sharder, imported from the installed release; without TE its `tex` is
answered during the call by `reference.partitioned_indices`. The packing is glue (`sft_plan`),
Megatron-LM's `SFTDataset` convention, which the wheel does not ship: documents to `2 * cp`,
the end padding on the last document, the total the smallest multiple of `2 * cp` and `tp * cp`.
Mapping, verdict and findings: docs/findings/megatron-core.md.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import math
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from thd_packing import reference
from thd_packing.conformance.protocol import (
    CONVENTION_VALUES,
    Config,
    Declared,
    Meta,
    NotDeclared,
    Packed,
)

from ._wiring import wired

EXPECTED_VERSION = "0.16.1"

WIRING = {
    "megatron.core.utils.get_thd_batch_on_this_cp_rank": {
        "batch": wired("rows and position ids (the glue's SFT-style pack of seqs)"),
        "cu_seqlens": wired("cu_seqlens (the real lengths)"),
        "cu_seqlens_padded": wired("cu_seqlens_padded (the glue's plan: tp_size, cp_size)"),
        "max_seqlen": wired("max_seqlen"),
        "cp_size": wired("cp_size"),
        "cp_rank": wired("cp_rank"),
    },
}


def te_partition_from_reference(cu_seqlens_padded: torch.Tensor, total_tokens: int,
                                world_size: int, rank: int) -> torch.Tensor:
    """TE's `thd_get_partitioned_indices(cu_seqlens_padded, total_tokens, world_size, rank)`,
    answered by the reference's literal TE partition (`reference.partitioned_indices`,
    R-CONSUMER-6), as the int64 index tensor megatron-core passes to `index_select`."""
    rows = reference.partitioned_indices(
        cu_seqlens_padded.cpu().numpy(), int(total_tokens), int(world_size), int(rank), "zigzag")
    return torch.tensor(rows, dtype=torch.int64)


def sft_plan(lengths: list[int], tp: int, cp: int) -> tuple[list[int], int]:
    """Glue, SFTDataset's convention: per-document padding to 2*cp, the end padding onto the
    last document, the total the smallest multiple of lcm(2*cp, tp*cp) (its findings page)."""
    doc_align = 2 * cp if cp > 1 else 1
    padded = [-(-n // doc_align) * doc_align for n in lengths]
    modulus = math.lcm(doc_align, tp * cp)
    total = -(-sum(padded) // modulus) * modulus
    if padded:
        padded[-1] += total - sum(padded)
    return padded, total


class MegatronCoreTarget:
    """Adapter: SFT-style packing glue, then megatron-core's THD sharder."""

    name = "megatron-core"
    # Spec 1.1: documents aligned to 2 * cp (cp * f), tp only on the total (R-ALIGN-5); the
    # end padding onto the last document (tail='last', the default). No bucket, FP8, minimum
    # rows, labels (a separate tensor the dataset shifts) or pad value (the glue's fill):
    # Megatron-LM's SFT packing pads to a fixed --seq-length. Zigzag only (no
    # cp_partition_mode). The glue builds the batch; cp size and rank are passed explicitly,
    # unvalidated; no THD unpack. max_rows: the glue builds every row it is asked for, and a
    # 2**31-row bucket would fill the machine's memory.
    declared = Declared(lacks=frozenset({"contiguous"}), convention={"seq_align": "cp"},
                        validated_elsewhere=frozenset({"config", "parallel_state", "batch",
                                                       "unpack"}),
                        max_rows=1 << 20)

    def __init__(self) -> None:
        from thd_packing.conformance.targets._megatron_view import import_megatron_core

        import_megatron_core()
        import megatron.core.utils as mcore_utils

        self.mcore_utils = mcore_utils
        self.version = importlib.metadata.version("megatron-core")
        if not hasattr(mcore_utils, "get_thd_batch_on_this_cp_rank"):
            raise RuntimeError(f"megatron-core {self.version} has no get_thd_batch_on_this_cp_rank")
        self.real_te = mcore_utils.tex is not None
        if self.real_te:
            partition = "TransformerEngine's thd_get_partitioned_indices"
        else:
            partition = ("TE's partition supplied by reference.partitioned_indices "
                         "(TransformerEngine not importable)")
        self.description = (
            f"megatron-core {self.version} utils.get_thd_batch_on_this_cp_rank (the code under "
            f"test) with {partition}; packing glue after Megatron-LM's SFTDataset"
        )

    @contextlib.contextmanager
    def _te(self) -> Iterator[None]:
        """Without TE: megatron-core's `tex` and TE version check answered for the call."""
        if self.real_te:
            yield
            return
        utils = self.mcore_utils
        saved = utils.tex, utils.is_te_min_version
        utils.tex = types.SimpleNamespace(thd_get_partitioned_indices=te_partition_from_reference)
        utils.is_te_min_version = lambda *args, **kwargs: True
        try:
            yield
        finally:
            utils.tex, utils.is_te_min_version = saved

    def _declined(self, config: Config, need_roll: Any) -> None:
        if need_roll:
            raise NotDeclared("Megatron-LM's labels are a separate tensor")
        for key in ("fp8", "bucket", "min_local_rows"):
            if config.get(key):
                raise NotDeclared(f"{key}: Megatron-LM's SFT packing has none")
        seq_align = config.get("seq_align", "cp")
        if seq_align not in CONVENTION_VALUES["seq_align"]:
            raise ValueError(f"seq_align must be 'cp' (SFTDataset's convention), got "
                             f"{seq_align!r}")
        for key, default in (("seq_align", "cp"), ("tail", "last"), ("max_num_seqs", None),
                             ("max_seqlen", "exact")):
            if config.get(key, default) != default:
                raise NotDeclared(f"{key}={config[key]!r}: SFTDataset's convention is "
                                  "seq_align='cp', tail='last', no static metadata")
        if config.get("cp_size", 1) != 1 and config.get("cp_layout", "zigzag") != "zigzag":
            raise NotDeclared("get_thd_batch_on_this_cp_rank: zigzag only")

    def pack(
        self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
        pad_value: Any = 0,
    ) -> Packed:
        self._declined(config, need_roll)
        if pad_value != 0:
            raise NotDeclared("the padding rows' fill is the glue's")
        tp, cp = int(config.get("tp_size", 1)), int(config.get("cp_size", 1))
        lengths = [int(s.shape[0]) for s in seqs]
        padded, total = sft_plan(lengths, tp, cp)
        first = np.asarray(seqs[0])
        tokens = np.full((total, *first.shape[1:]), pad_value, dtype=first.dtype)
        positions = np.zeros(total, dtype=np.int64)
        cu_padded = np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
        for s, start, size in zip(seqs, cu_padded[:-1], padded, strict=True):
            tokens[start:start + s.shape[0]] = s
            positions[start:start + size] = np.arange(size)  # SFT: positions run on into padding
        cu_real = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        device = "cuda" if self.real_te else "cpu"
        batch = {"tokens": torch.from_numpy(tokens)[None].to(device),
                 "position_ids": torch.from_numpy(positions)[None].to(device)}
        with self._te():
            # --- megatron-core's code under test -------------------------------------------
            out, params = self.mcore_utils.get_thd_batch_on_this_cp_rank(
                batch, torch.from_numpy(cu_real).to(device),
                torch.from_numpy(cu_padded).to(device),
                torch.tensor([max(padded, default=0)], dtype=torch.int32, device=device),
                cp_size=cp, cp_rank=cp_rank,
            )
        cu_q = params.cu_seqlens_q.cpu().numpy()
        cu_q_padded = params.cu_seqlens_q_padded.cpu().numpy()
        meta: Meta = {
            "seqlens": np.diff(cu_q).astype(np.int32),
            "cu_seqlens": cu_q,
            "seqlens_padded": np.diff(cu_q_padded).astype(np.int32),
            "cu_seqlens_padded": cu_q_padded,
            "max_seqlen": params.max_seqlen_q,
            "total": int(cu_q_padded[-1]),
            "local_rows": int(out["tokens"].shape[1]),
        }
        return Packed(out["tokens"][0].cpu().numpy(), out["position_ids"][0].cpu().numpy(), meta)


TARGET = MegatronCoreTarget
