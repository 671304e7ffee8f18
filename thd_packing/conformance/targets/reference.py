"""The `reference` target: the suite's own oracle run as a target (self-check)."""

from __future__ import annotations

from typing import Any

import numpy as np

from thd_packing import reference
from thd_packing.reference import bins as reference_bins

from ..bins_protocol import BinDeclared, Binned
from ..protocol import Config, Declared, Meta, Packed, plain_meta, plan_fields


def plan_from_meta(meta: Meta) -> Any:
    return reference.Plan(**plan_fields(meta, lambda a: np.asarray(a, dtype=np.int32)))


class ReferenceTarget:
    """Adapter over `reference/` (NumPy in, NumPy out: no conversion)."""

    name = "reference"
    description = "reference/ (literal NumPy), self-check"
    declared = Declared(features=frozenset(
        {"bucket", "fp8", "fp8_recipes", "min_local_rows", "need_roll", "pad_value",
         "static_metadata", "tail_segment", "seq_align_cp", "seq_align_none", "tail_tokens",
         "fixed_total", "labels_ignore"}))
    declared_bins = BinDeclared(
        algorithms=frozenset(reference_bins.ALGORITHMS),
        overflow=frozenset(reference_bins.OVERFLOWS), costs=frozenset(reference_bins.COSTS),
        order="input", features=frozenset({"min_bins", "bins_multiple_of", "equal_size"}))

    def bin(self, lengths: Any, config: Config) -> Binned:
        """reference.bins.bin_lengths, as it returns its pieces and fates."""
        out = reference_bins.bin_lengths(lengths, reference_bins.as_config(dict(config)))
        return Binned(out.bins, out.fates)

    def partition(self, weights: Any, k: Any, equal_size: Any) -> Any:
        return reference_bins.partition(weights, k, equal_size)

    def pack(
        self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
        pad_value: Any = 0,
    ) -> Packed:
        rows, pos, plan = reference.pack_thd(
            seqs, reference.PackConfig(**config), cp_rank, need_roll=need_roll,
            pad_value=pad_value,
        )
        return Packed(rows, pos, plain_meta(plan))

    def pack_masked(
        self, values: Any, mask: Any, config: Config, cp_rank: int, *,
        need_roll: bool = False, pad_value: Any = 0,
    ) -> Packed:
        rows, pos, plan = reference.pack_masked(values, mask, reference.PackConfig(**config),
                                                cp_rank, need_roll=need_roll,
                                                pad_value=pad_value)
        return Packed(rows, pos, plain_meta(plan))

    def plan_as_is(self, seqlens: Any, config: Any) -> Any:
        return reference.plan_thd(seqlens, config)

    def pack_as_is(self, seqs: list[np.ndarray], config: Any, cp_rank: int) -> Any:
        return reference.pack_thd(seqs, config, cp_rank)

    def unpack_as_is(
        self, shards: list[np.ndarray], meta: Meta, config: Config, *, plan: Any = None,
        config_obj: Any = None,
    ) -> Any:
        return reference.unpack_thd(
            shards, plan_from_meta(meta) if plan is None else plan,
            reference.PackConfig(**config) if config_obj is None else config_obj)

    def native_scalar(self, value: bool | int | float) -> Any:
        return np.array(value)

    def plan(self, seqlens: Any, config: Config) -> Meta:
        return plain_meta(reference.plan_thd(seqlens, reference.PackConfig(**config)))

    def loss_mask(self, meta: Meta, config: Config, cp_rank: int) -> np.ndarray:
        return reference.loss_mask(plan_from_meta(meta), reference.PackConfig(**config), cp_rank)

    def unpack(self, shards: list[np.ndarray], meta: Meta, config: Config) -> list[np.ndarray]:
        return list(
            reference.unpack_thd(shards, plan_from_meta(meta), reference.PackConfig(**config))
        )

    def resolve_engine_config(self, **flags: Any) -> Config:
        cfg = reference.resolve_engine_config(**flags)
        return {k: getattr(cfg, k) for k in
                ("tp_size", "cp_size", "cp_layout", "fp8", "bucket", "min_local_rows")}

    def distributed_unpack(
        self, rows: np.ndarray, meta: Meta, config: Config, cp_rank: int, group: Any
    ) -> tuple[list[np.ndarray], np.ndarray | None]:
        """all_gather the rows over the live group, then the reference's unpack."""
        import torch
        import torch.distributed as dist

        if group is None:  # cp_size 1: nothing to gather
            return self.unpack([rows], meta, config), None
        local = torch.from_numpy(np.ascontiguousarray(rows))
        gathered = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(gathered, local, group=group)
        return self.unpack([g.numpy() for g in gathered], meta, config), None


TARGET = ReferenceTarget
