"""impl's API beyond the adapter protocol, as the suite's checks call it: its batch containers
(nested tensors, flat values with `lengths=`, tensor subclasses, float8 dtypes), the `meta`
device and torch-only dtypes (spec section 1a), the row map, and the Megatron adapter's
postprocess in one process and under a newer megatron-core. Only impl has these, so their
checks live here, not in the suite (conformance/), and run against `IMPL` through the suite's
own comparisons.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np
import torch
from hypothesis import settings

import impl
from thd_packing.conformance.plugin import CI_EXAMPLES
from thd_packing.conformance.protocol import Config, Meta, Packed, capabilities, plain_meta
from thd_packing.conformance.targets.impl import (
    ImplTarget,
    as_tensor,
    packed,
    plan_from_meta,
    run_pack,
    tensor,
    to_torch,
)

from ._impl_forms import BATCH_FORMS, REJECTED_FORMS, jagged_offsets, to_form, viewed

HOST, VALUELESS = "cpu", "meta"


def ci_settings(weight: float = 1.0) -> settings:
    """The suite's ci profile (derandomized, no deadline) with its example count scaled."""
    return settings(settings.get_profile("ci"), max_examples=max(3, round(CI_EXAMPLES * weight)))


@dataclass(frozen=True)
class ArraySpec:
    """An array on `meta`, which holds no values: its shape, dtype (NumPy's spelling where NumPy
    has it) and device."""

    shape: tuple[int, ...]
    dtype: str
    device: str


def spec_of(t: torch.Tensor) -> ArraySpec:
    return ArraySpec(tuple(t.shape), str(t.dtype).removeprefix("torch."), t.device.type)


# Forms impl takes on `meta`: None where the lengths stay on the host (packed by shape), else
# the field whose values live on `meta` (R-DEV-3's ValueError names it).
VALUELESS_FORMS: dict[str, str | None] = {
    "list": None, "tuple": None, "parameters": None, "flat-list": None, "flat-tensor": None,
    "flat-device-lengths": "lengths", "nested": "offsets", "padded-left": "mask",
    "padded-mask-only": "mask",  # the values on the host, only the mask on `meta`
    "nested-lengths-only": "lengths",  # values and offsets on the host, lengths() on `meta`
}


def valueless_batch(form: str, seqs: list[np.ndarray], on: list[bool] | None
                    ) -> tuple[Any, dict[str, Any]]:
    """The batch in `form` with its arrays (`on`: those flagged) moved to `meta`."""
    flags = [True] * len(seqs) if on is None else on
    parts = [torch.from_numpy(s) for s in seqs]
    moved = [p.to(VALUELESS) if f else p for p, f in zip(parts, flags, strict=True)]
    lengths = [p.shape[0] for p in parts]
    if form == "list":
        return moved, {}
    if form == "tuple":
        return tuple(moved), {}
    if form == "parameters":
        return [torch.nn.Parameter(p, requires_grad=False) for p in moved], {}
    if form == "nested-lengths-only":
        return torch.nested.nested_tensor_from_jagged(
            torch.cat(parts), jagged_offsets(lengths),
            lengths=torch.tensor(lengths, device=VALUELESS)), {}
    if form in ("padded-left", "padded-mask-only"):  # the mask on `meta`; the values too, or not
        x = torch.zeros((len(seqs), max(lengths), *parts[0].shape[1:]), dtype=parts[0].dtype,
                        device=VALUELESS if form == "padded-left" else None)
        return x, {"mask": torch.zeros(x.shape[:2], dtype=torch.bool, device=VALUELESS)}
    values = torch.cat(parts).to(VALUELESS)
    if form == "flat-list":
        return values, {"lengths": lengths}
    if form == "flat-tensor":
        return values, {"lengths": torch.tensor(lengths)}
    if form == "flat-device-lengths":
        return values, {"lengths": torch.tensor(lengths, device=VALUELESS)}
    if form == "nested":
        return torch.nested.nested_tensor_from_jagged(
            values, jagged_offsets(lengths, VALUELESS)), {}
    raise ValueError(f"unknown valueless form {form!r}")


# torch dtypes that are none of bool, integer, floating or complex (R-ERR-1): raw bits,
# quantized integers, and a floating type packed two to a byte.
OTHER_DTYPES: dict[str, int] = {  # name -> bytes per element
    name: getattr(torch, name).itemsize
    for name in ("bits8", "bits16", "bits1x8", "bits2x4", "bits4x2", "quint8", "qint8",
                 "qint32", "quint4x2", "quint2x4", "float4_e2m1fn_x2")
    if hasattr(torch, name)}


@contextlib.contextmanager
def newer_megatron(cp_rank: int, group_size: int = 0,
                   rank_group: Any = None) -> Iterator[Any]:
    """For one call, what releases newer than the installed megatron-core add:
    `PackedSeqParams.cp_partition_mode` and `get_dynamic_data_context_parallel_groups`, which
    must be asked for `group_size` and yields a new group; `torch.distributed.get_rank` answers
    `cp_rank` for `rank_group` (default: that group) only."""
    from megatron.core import packed_seq_params, parallel_state

    base = packed_seq_params.PackedSeqParams
    newer = base
    if "cp_partition_mode" not in inspect.signature(base).parameters:
        newer = dataclasses.make_dataclass(
            "PackedSeqParams", [("cp_partition_mode", Any, dataclasses.field(default=None))],
            bases=(base,))
    group = _megatron()._CPGroup()

    def get_groups(group_size: int) -> Any:
        if group_size != expected_size:
            raise AssertionError(f"dynamic CP groups asked for size {group_size!r}, "
                                 f"local_cp_size is {expected_size}")
        return group

    def get_rank(group: Any = None) -> int:
        if group is not expected:
            raise AssertionError(f"get_rank over {group!r}, not the dynamic CP group")
        return cp_rank

    expected = group if rank_group is None else rank_group
    expected_size = group_size
    with mock.patch.object(packed_seq_params, "PackedSeqParams", newer), \
            mock.patch.object(parallel_state, "get_dynamic_data_context_parallel_groups",
                              get_groups, create=True), \
            mock.patch.object(torch.distributed, "get_rank", get_rank):
        yield group


def _megatron() -> Any:
    """The impl target's Megatron helpers, imported on first use (megatron-core with them)."""
    from thd_packing.conformance.targets import _megatron_impl

    return _megatron_impl


class ImplApi(ImplTarget):
    """The impl target with the methods only impl's API can answer."""

    batch_forms = BATCH_FORMS
    rejected_forms = REJECTED_FORMS  # form -> (the rule, a word the message must contain)
    devices = (HOST, VALUELESS)
    valueless_forms = VALUELESS_FORMS
    other_dtypes = OTHER_DTYPES

    def pack_as(self, form: str, seqs: list[np.ndarray], config: Config, cp_rank: int, *,
                need_roll: bool = False, pad_value: Any = 0) -> Packed:
        """pack_thd of the batch in impl's container `form` (BATCH_FORMS, REJECTED_FORMS)."""
        batch, kwargs = to_form(form, seqs)
        return run_pack(batch, config, cp_rank, need_roll=need_roll, pad_value=pad_value,
                        **kwargs)

    def pack_flat(self, values: Any, lengths: Any, config: Config, cp_rank: int) -> Packed:
        """pack_thd(values, lengths=...): `values` an ndarray, or for a rejection a list of
        arrays (handed over as a list of tensors)."""
        flat = tensor(values) if isinstance(values, np.ndarray) else to_torch(values)
        return run_pack(flat, config, cp_rank, lengths=as_tensor(lengths))

    def pack_float8(self, bits: list[np.ndarray], dtype: str, config: Config, cp_rank: int, *,
                    pad_value: Any = 0) -> Packed:
        """pack_thd of the bits viewed as float8 `dtype`; the rows back as their bits (uint8)."""
        rows, pos, plan = impl.pack_thd(viewed(bits, dtype), impl.PackConfig(**config), cp_rank,
                                        pad_value=pad_value)
        return packed(rows.view(torch.uint8), pos, plan)

    def pack_valueless(self, form: str, seqs: list[np.ndarray], config: Config, cp_rank: int, *,
                       need_roll: bool = False, pad_value: Any = 0,
                       on: list[bool] | None = None) -> tuple[ArraySpec, ArraySpec, Meta]:
        """pack_thd of the batch in `form` on `meta` (`on`: the elements moved there)."""
        batch, kwargs = valueless_batch(form, seqs, on)
        rows, pos, plan = impl.pack_thd(batch, impl.PackConfig(**config), cp_rank,
                                        need_roll=need_roll, pad_value=pad_value, **kwargs)
        return spec_of(rows), spec_of(pos), plain_meta(plan)

    def unpack_valueless(self, shards: list[np.ndarray], meta: Meta, config: Config, *,
                         on: list[bool] | None = None) -> list[ArraySpec]:
        flags = [True] * len(shards) if on is None else on
        tensors = [torch.from_numpy(np.ascontiguousarray(s)) for s in shards]
        tensors = [t.to(VALUELESS) if f else t for t, f in zip(tensors, flags, strict=True)]
        out = impl.unpack_thd(tensors, plan_from_meta(meta), impl.PackConfig(**config))
        return [spec_of(t) for t in out]

    def pack_viewed(self, bits: list[np.ndarray], dtype: str, config: Config,
                    cp_rank: int) -> Any:
        """pack_thd of the arrays' bytes viewed as torch's dtype `dtype`."""
        return impl.pack_thd(viewed(bits, dtype), impl.PackConfig(**config), cp_rank)

    def row_map(self, meta: Meta, config: Config, cp_rank: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        from impl.rowmap import row_sources

        seq, offset, real = row_sources(plan_from_meta(meta), impl.PackConfig(**config), cp_rank)
        return seq.numpy(), offset.numpy(), real.numpy()

    def megatron_postprocess_valueless(self, output: np.ndarray, meta: Meta,
                                       config: Config) -> list[ArraySpec]:
        """postprocess_thd_engine (cp_size 1) of `output` moved to `meta`, the params on the
        host (R-DEV-1, R-DEV-2, R-MEG-3). The result's offsets hold no values there, so its
        components are its values sliced at the host offsets: too few rows show as a short
        component."""
        from impl import megatron

        meg = _megatron()
        cfg = meg._full(config)
        input_ids, batch_size = meg._input_ids(meta)
        local = torch.from_numpy(np.ascontiguousarray(output)).to(VALUELESS)
        with meg.fake_parallel_state(cfg["tp_size"], 1, 0):
            out = megatron.postprocess_thd_engine(local, meg.thd_params(meta), input_ids,
                                                  batch_size, **meg._layout(cfg))
        values = out.values()
        bounds = input_ids.offsets().tolist()
        return [spec_of(values[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def gathered_unpack(self, shards: list[np.ndarray], meta: Meta, config: Config,
                        cp_rank: int) -> tuple[list[np.ndarray], np.ndarray | None]:
        """postprocess_thd_engine of rank `cp_rank`, its all_gather answered in this process by
        `shards` over the CP group (R-MEG-3)."""
        meg = _megatron()
        group = meg._CPGroup()
        with meg._answered_gather(shards, cp_rank, group):
            return meg.distributed_unpack(shards[cp_rank], meta, config, cp_rank, group)

    def megatron_preprocess_newer(self, seqs: list[np.ndarray], config: Config, cp_rank: int,
                                  *, dynamic: bool = False
                                  ) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
        """preprocess_thd_engine under `newer_megatron`. With `dynamic`, the CP size comes from
        `local_cp_size` and the parallel state says cp_size 1 (ignoring local_cp_size packs the
        wrong shard); the view then says whether the params carry it and the dynamic group."""
        from impl import megatron

        meg = _megatron()
        cfg = meg._full(config)
        kwargs: dict[str, Any] = {"use_fp8_padding": cfg["fp8"],
                                  "min_local_rows": cfg["min_local_rows"],
                                  "pad_to_length_bucket": cfg["bucket"],
                                  "cp_layout": cfg["cp_layout"]}
        state_cp = cfg["cp_size"]
        if dynamic:
            kwargs["local_cp_size"] = cfg["cp_size"]
            state_cp = 1
        with newer_megatron(cp_rank, cfg["cp_size"]) as group, meg.fake_parallel_state(
                cfg["tp_size"], state_cp, 0 if dynamic else cp_rank):
            rows, params, pos = megatron.preprocess_thd_engine(meg._nested(seqs), **kwargs)
        assert pos is not None  # pre_process=True
        view = meg.params_dict(params)
        if dynamic:
            view["dynamic_group_ok"] = (getattr(params, "local_cp_size", None) == cfg["cp_size"]
                                        and getattr(params, "cp_group", None) is group)
        return rows.numpy(), view, pos.numpy()

    def gathered_unpack_dynamic(self, shards: list[np.ndarray], meta: Meta, config: Config,
                                cp_rank: int) -> tuple[list[np.ndarray], np.ndarray | None]:
        """postprocess_thd_engine with `local_cp_size` under `newer_megatron`: the group must
        come from `PackedSeqParams.cp_group` (a fresh one from
        get_dynamic_data_context_parallel_groups fails get_rank and all_gather), the parallel
        state says cp_size 1."""
        meg = _megatron()
        own = meg._CPGroup()
        params = meg.thd_params(meta)
        params.cp_group = own
        params.local_cp_size = len(shards)
        with newer_megatron(cp_rank, len(shards), rank_group=own), \
                meg._answered_gather(shards, cp_rank, own):
            return meg._postprocess(shards[cp_rank], meta, config, params, (1, 0, None),
                                    local_cp_size=len(shards))


IMPL = ImplApi()
CAPS = capabilities(IMPL)
