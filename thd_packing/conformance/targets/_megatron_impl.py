"""impl/megatron.py driven through a fake Megatron parallel state (optionally a real group)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import torch

from ..protocol import Config, Meta
from ._megatron_view import KwargsParams, cu_params, params_dict, thd_params, unpack_with_grad


def fake_parallel_state(tp: int, cp: int, rank: int, group: Any = None) -> Any:
    """megatron.core.parallel_state's getters patched, for the duration of one `with`."""
    from megatron.core import parallel_state

    values = {"get_tensor_model_parallel_world_size": tp, "get_context_parallel_world_size": cp,
              "get_context_parallel_rank": rank, "get_context_parallel_group": group}
    getters: dict[str, Any] = {name: (lambda *a, _v=value, **k: _v)
                               for name, value in values.items()}
    return mock.patch.multiple(parallel_state, **getters)


def _full(config: Config) -> Config:
    return {"tp_size": 1, "cp_size": 1, "cp_layout": "zigzag", "fp8": False, "bucket": None,
            "min_local_rows": None, **config}


def _nested(seqs: list[np.ndarray]) -> Any:
    return torch.nested.nested_tensor(
        [torch.from_numpy(np.ascontiguousarray(s)) for s in seqs], layout=torch.jagged)


def _layout(cfg: Config) -> dict[str, Any]:
    """postprocess' layout keywords: cp_layout where not the default, max_num_seqs where set
    (R-MEG-10: the params hold N + 1 offsets)."""
    out = {} if cfg["cp_layout"] == "zigzag" else {"cp_layout": cfg["cp_layout"]}
    if cfg.get("max_num_seqs") is not None:
        out["max_num_seqs"] = cfg["max_num_seqs"]
    return out


def preprocess(seqs: list[np.ndarray], config: Config, cp_rank: int, *,
               need_roll: bool = False) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    from impl import megatron

    cfg = _full(config)
    # Only non-default arguments are passed, as a caller relying on verl's defaults would:
    # a wrong default in the adapter's signature then changes the result.
    kwargs = {"need_roll": need_roll, "use_fp8_padding": cfg["fp8"],
              "min_local_rows": cfg["min_local_rows"], "pad_to_length_bucket": cfg["bucket"],
              "cp_layout": cfg["cp_layout"]}
    defaults = {"need_roll": False, "use_fp8_padding": False, "min_local_rows": None,
                "pad_to_length_bucket": None, "cp_layout": "zigzag"}
    kwargs = {k: v for k, v in kwargs.items() if v != defaults[k] or type(v) is not
              type(defaults[k])}
    # Spec 1.1's static metadata: keyword-only extensions, passed only when the config sets them
    # (R-STATIC-1, R-STATIC-2, R-MEG-10).
    kwargs.update({k: config[k] for k in ("max_num_seqs", "max_seqlen") if k in config})
    with fake_parallel_state(cfg["tp_size"], cfg["cp_size"], cp_rank):
        rows, params, pos = megatron.preprocess_thd_engine(_nested(seqs), **kwargs)
    assert pos is not None  # pre_process=True
    return rows.numpy(), params_dict(params), pos.numpy()


def preprocess_with_params(seqs: list[np.ndarray], config: Config, cp_rank: int,
                           params_cls: Any, *, need_roll: bool = False
                           ) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    """preprocess_thd_engine with megatron-core's PackedSeqParams replaced by `params_cls` (an
    older or a narrower release's class, R-MEG-4)."""
    from megatron.core import packed_seq_params

    with mock.patch.object(packed_seq_params, "PackedSeqParams", params_cls):
        return preprocess(seqs, config, cp_rank, need_roll=need_roll)


def preprocess_kwargs(seqs: list[np.ndarray], config: Config, cp_rank: int, *,
                      need_roll: bool = False) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    """`preprocess_with_params` with a stub taking `**kwargs` (R-MEG-4): the view adds `given`."""
    return preprocess_with_params(seqs, config, cp_rank, KwargsParams, need_roll=need_roll)


def _input_ids(meta: Meta) -> tuple[Any, int]:
    """A jagged nested tensor with the plan's lengths (postprocess reads only its offsets)."""
    lengths = [int(x) for x in np.asarray(meta["seqlens"])]
    if "num_seqs" in meta:  # spec 1.1: entries past B are the plan's, not the batch's (R-META-7)
        lengths = lengths[: int(meta["num_seqs"])]
    return torch.nested.nested_tensor([torch.zeros(n) for n in lengths],
                                      layout=torch.jagged), len(lengths)


def _postprocess(rows: np.ndarray, meta: Meta, config: Config, params: Any,
                 state: tuple[int, int, Any], **adapter: Any,
                 ) -> tuple[list[np.ndarray], np.ndarray | None]:
    """postprocess_thd_engine of `rows` under a parallel state of (cp size, cp rank, group),
    with the layout and `adapter` keywords; the gradient proves R-MEG-3's autograd."""
    from impl import megatron

    cfg = _full(config)
    input_ids, batch_size = _input_ids(meta)

    def post(local: torch.Tensor) -> Any:
        with fake_parallel_state(cfg["tp_size"], *state):
            return megatron.postprocess_thd_engine(local, params, input_ids, batch_size,
                                                   **_layout(cfg), **adapter)

    return unpack_with_grad(rows, post)


def distributed_unpack(rows: np.ndarray, meta: Meta, config: Config, cp_rank: int,
                       group: Any) -> tuple[list[np.ndarray], np.ndarray | None]:
    """postprocess_thd_engine over the live group; the gradient proves R-MEG-3's autograd."""
    return _postprocess(rows, meta, config, thd_params(meta),
                        (_full(config)["cp_size"], cp_rank, group))


def preprocess_as_is(input_ids: Any, config: Config, cp_rank: int, **adapter: Any) -> Any:
    """preprocess_thd_engine with `input_ids` exactly as the suite gave it (R-ERR-1), and the
    adapter's own keyword arguments in `adapter` (e.g. `cp_layout`, `local_cp_size`)."""
    from impl import megatron

    cfg = _full(config)
    with fake_parallel_state(cfg["tp_size"], cfg["cp_size"], cp_rank):
        return megatron.preprocess_thd_engine(input_ids, **adapter)


def postprocess_one(output: np.ndarray, meta: Meta, config: Config, *,
                    params: dict[str, np.ndarray] | None = None,
                    **adapter: Any) -> list[np.ndarray]:
    """postprocess_thd_engine on one process (cp_size 1): `output` as given, PackedSeqParams
    from `meta` with the fields in `params` replaced (R-MEG-3, R-ERR-11)."""
    from impl import megatron

    cfg = _full(config)
    packed = thd_params(meta)
    for key, value in (params or {}).items():
        setattr(packed, key, None if value is None else
                torch.as_tensor(np.asarray(value), dtype=torch.int32))
    input_ids, count = _input_ids(meta)
    with fake_parallel_state(cfg["tp_size"], cfg["cp_size"], 0):
        batch_size = adapter.pop("batch_size", count)
        out = megatron.postprocess_thd_engine(torch.from_numpy(output), packed, input_ids,
                                              batch_size, **adapter)
    return [p.numpy() for p in out.unbind()]


class _CPGroup:
    """Stands for the CP process group: the in-process all_gather accepts no other group."""


@contextlib.contextmanager
def _answered_gather(shards: list[np.ndarray], cp_rank: int, group: Any) -> Iterator[None]:
    """torch.distributed.all_gather answered in this process with `shards` (every rank's rows)
    for one call; it must go over `group`, into cp_size tensors, handed the local rows."""
    parts = [torch.from_numpy(np.ascontiguousarray(s))[None] for s in shards]

    def all_gather(output_list: list[torch.Tensor], tensor: torch.Tensor, group: Any = None,
                   async_op: bool = False) -> None:
        if group is not expected:
            raise AssertionError(f"all_gather over {group!r}, not the CP group")
        if len(output_list) != len(parts):
            raise AssertionError(f"all_gather into {len(output_list)} tensors, cp_size "
                                 f"{len(parts)}")
        mine = parts[cp_rank]
        if tensor.shape != mine.shape or tensor.detach().numpy().tobytes() != \
                mine.numpy().tobytes():
            raise AssertionError("all_gather was handed something other than the local rows")
        for out, part in zip(output_list, parts, strict=True):
            out.copy_(part)

    expected = group
    with mock.patch.object(torch.distributed, "all_gather", all_gather):
        yield


def packed_preprocess(values: np.ndarray, mask: np.ndarray, config: Config, cp_rank: int
                      ) -> tuple[np.ndarray, dict[str, Any]]:
    """preprocess_packed_seqs of a padded batch and its bool mask (R-MEG-8); only non-default
    arguments are passed."""
    from impl import megatron

    cfg = _full(config)
    kwargs = {"use_fp8_padding": True} if cfg["fp8"] is True else {}
    with fake_parallel_state(cfg["tp_size"], cfg["cp_size"], cp_rank):
        rows, params = megatron.preprocess_packed_seqs(
            torch.from_numpy(np.ascontiguousarray(values)), torch.from_numpy(mask), **kwargs)
    return rows.numpy(), params_dict(params)


def packed_distributed(rows: np.ndarray, cu_padded: np.ndarray, mask: np.ndarray,
                       config: Config, cp_rank: int, group: Any
                       ) -> tuple[np.ndarray, np.ndarray | None]:
    """postprocess_packed_seqs over a process group (R-MEG-9), with R-MEG-3's gradient."""
    from impl import megatron

    cfg = _full(config)
    params = cu_params(cu_padded)
    m = torch.from_numpy(mask)

    def post(local: torch.Tensor) -> Any:
        with fake_parallel_state(cfg["tp_size"], cfg["cp_size"], cp_rank, group):
            return megatron.postprocess_packed_seqs(local, params, m, m.shape[0], m.shape[1])

    parts, grad = unpack_with_grad(rows, post)
    return np.stack(parts), grad


def packed_postprocess_one(output: np.ndarray, cu_padded: np.ndarray, mask: Any,
                           config: Config, *, params: dict[str, Any] | None = None,
                           **adapter: Any) -> np.ndarray:
    """postprocess_packed_seqs on one process (cp_size 1): `output` and an ndarray `mask` as
    given (not copied), the params from `cu_padded` with the fields in `params` replaced (an
    array keeps its dtype and shape); `batch_size`, `seq_len` default to the mask's (R-MEG-9)."""
    from impl import megatron

    cfg = _full(config)
    packed = cu_params(cu_padded)
    for key, value in (params or {}).items():
        setattr(packed, key, None if value is None else torch.from_numpy(np.asarray(value)))
    m = torch.from_numpy(mask) if isinstance(mask, np.ndarray) else mask
    batch_size = adapter.pop("batch_size", None)
    seq_len = adapter.pop("seq_len", None)
    with fake_parallel_state(cfg["tp_size"], 1, 0):
        out = megatron.postprocess_packed_seqs(
            torch.from_numpy(np.ascontiguousarray(output)), packed, m,
            m.shape[0] if batch_size is None else batch_size,
            m.shape[1] if seq_len is None else seq_len, **adapter)
    return out.numpy()


def packed_gathered(shards: list[np.ndarray], cu_padded: np.ndarray, mask: np.ndarray,
                    config: Config, cp_rank: int) -> tuple[np.ndarray, np.ndarray | None]:
    """postprocess_packed_seqs of rank `cp_rank`, its all_gather answered in this process by
    `shards` over the CP group only (R-MEG-9)."""
    group = _CPGroup()
    with _answered_gather(shards, cp_rank, group):
        return packed_distributed(shards[cp_rank], cu_padded, mask, config, cp_rank, group)
