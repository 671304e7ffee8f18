"""The `impl` target (default): the fast torch implementation and its Megatron adapter.

impl's API beyond the protocol (its other batch containers, float8 dtypes, the `meta` device,
the row map, postprocess under a newer megatron-core) is checked by tests/impl/ through a
subclass of this target."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

import impl
import impl.bins

from ..bins_protocol import BinDeclared, Binned
from ..protocol import Config, Declared, Meta, Packed, plain_meta, plan_fields


def tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing `array`'s memory. A read-only array is valid input (R-IN-6) that impl
    never writes, so torch's warning about non-writable arrays does not apply."""
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable",
                                UserWarning)
        return torch.from_numpy(array)


def as_tensor(x: Any) -> Any:
    """An ndarray as a tensor sharing its memory and strides; anything else as given."""
    return tensor(x) if isinstance(x, np.ndarray) else x


def to_torch(seqs: Any) -> Any:
    """NumPy elements become tensors sharing memory; anything else passes through (R-ERR-1)."""
    if not isinstance(seqs, list | tuple):
        return seqs
    out = [as_tensor(s) for s in seqs]
    return tuple(out) if isinstance(seqs, tuple) else out


def _megatron(name: str) -> Any:
    """A method running `_megatron_impl.<name>`, imported on first use (megatron-core is
    imported only by a run that reaches impl's Megatron adapter)."""
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        from . import _megatron_impl

        return getattr(_megatron_impl, name)(*args, **kwargs)
    method.__name__ = name
    return method


def packed(rows: torch.Tensor, pos: torch.Tensor, plan: Any) -> Packed:
    return Packed(rows.detach().numpy(), pos.numpy(), plain_meta(plan))


def run_pack(batch: Any, config: Config, cp_rank: Any, **kwargs: Any) -> Packed:
    return packed(*impl.pack_thd(batch, impl.PackConfig(**config), cp_rank, **kwargs))


def plan_from_meta(meta: Meta) -> Any:
    """impl's Plan built from plain data (the suite may tamper with it, R-ERR-11)."""
    return impl.Plan(**plan_fields(
        meta, lambda a: torch.as_tensor(np.asarray(a), dtype=torch.int32)))


def shard_tensors(shards: Any) -> Any:
    """ndarray shards as tensors; a list that is not one, or another element, as given."""
    if not isinstance(shards, list | tuple):
        return shards
    return [torch.from_numpy(np.ascontiguousarray(s)) if isinstance(s, np.ndarray) else s
            for s in shards]


class ImplTarget:
    """Adapter over `impl/` (torch CPU tensors): the packer and the binner."""

    name = "impl"
    description = "impl/ (vectorized torch) and impl/megatron.py"
    declared = Declared(features=frozenset(
        {"bucket", "fp8", "fp8_recipes", "min_local_rows", "need_roll", "pad_value",
         "static_metadata", "tail_segment", "seq_align_cp", "large_totals",
         "forged_plan_checks", "seq_align_none", "tail_tokens", "fixed_total",
         "labels_ignore"}))

    declared_bins = BinDeclared(
        algorithms=frozenset(impl.bins.ALGORITHMS), overflow=frozenset(impl.bins.OVERFLOWS),
        costs=frozenset(impl.bins.COSTS), order="input",
        features=frozenset({"min_bins", "bins_multiple_of", "equal_size"}))

    def bin(self, lengths: Any, config: Config) -> Binned:
        """impl.bins.bin_lengths; its pieces and fates as it returns them (spec/bins.md)."""
        fields = dict(config)
        if isinstance(fields.get("pack"), dict):
            fields["pack"] = impl.PackConfig(**fields["pack"])
        out = impl.bin_lengths(lengths, impl.BinConfig(**fields))
        return Binned(out.bins, out.fates)

    def partition(self, weights: Any, k: Any, equal_size: Any) -> Any:
        return impl.partition(weights, k, equal_size)

    def pack(
        self, seqs: Any, config: Config, cp_rank: Any, *, need_roll: Any = False,
        pad_value: Any = 0,
    ) -> Packed:
        # Defaults are left to the function, so a wrong default in its signature shows.
        kwargs: dict[str, Any] = {}
        if need_roll is not False:
            kwargs["need_roll"] = need_roll
        if not (pad_value == 0 and type(pad_value) is int):
            kwargs["pad_value"] = pad_value
        return run_pack(to_torch(seqs), config, cp_rank, **kwargs)

    def pack_masked(
        self, values: Any, mask: Any, config: Config, cp_rank: int, *,
        need_roll: bool = False, pad_value: Any = 0,
    ) -> Packed:
        return run_pack(as_tensor(values), config, cp_rank, need_roll=need_roll,
                    pad_value=pad_value, mask=as_tensor(mask))

    def plan_as_is(self, seqlens: Any, config: Any) -> Any:
        return impl.plan_thd(seqlens, config)

    def pack_as_is(self, seqs: list[np.ndarray], config: Any, cp_rank: int) -> Any:
        return impl.pack_thd(to_torch(seqs), config, cp_rank)

    def unpack_as_is(
        self, shards: list[np.ndarray], meta: Meta, config: Config, *, plan: Any = None,
        config_obj: Any = None,
    ) -> Any:
        return impl.unpack_thd(shard_tensors(shards),
                               plan_from_meta(meta) if plan is None else plan,
                               impl.PackConfig(**config) if config_obj is None else config_obj)

    def native_scalar(self, value: bool | int | float) -> Any:
        return torch.tensor(value)

    def loss_mask(self, meta: Meta, config: Config, cp_rank: int) -> np.ndarray:
        """Capability `loss_mask`: impl.loss_mask on the plan (R-LABEL-3)."""
        return impl.loss_mask(plan_from_meta(meta), impl.PackConfig(**config), cp_rank).numpy()

    def plan(self, seqlens: Any, config: Config) -> Meta:
        return plain_meta(impl.plan_thd(seqlens, impl.PackConfig(**config)))

    def unpack(self, shards: list[np.ndarray], meta: Meta, config: Config) -> list[np.ndarray]:
        out = impl.unpack_thd(shard_tensors(shards), plan_from_meta(meta),
                              impl.PackConfig(**config))
        return [t.numpy() for t in out]

    def resolve_engine_config(self, **flags: Any) -> Config:
        cfg = impl.resolve_engine_config(**flags)
        return {k: getattr(cfg, k) for k in
                ("tp_size", "cp_size", "cp_layout", "fp8", "bucket", "min_local_rows")}

    # impl/megatron.py's adapter (conformance/targets/_megatron_impl.py; protocol.METHODS says what
    # each method does)
    megatron_preprocess_as_is = _megatron("preprocess_as_is")
    megatron_preprocess_with_params = _megatron("preprocess_with_params")
    megatron_postprocess = _megatron("postprocess_one")
    megatron_preprocess = _megatron("preprocess")
    megatron_preprocess_kwargs = _megatron("preprocess_kwargs")
    packed_preprocess = _megatron("packed_preprocess")
    packed_gathered = _megatron("packed_gathered")
    packed_postprocess = _megatron("packed_postprocess_one")
    packed_distributed = _megatron("packed_distributed")
    distributed_unpack = _megatron("distributed_unpack")


TARGET = ImplTarget
