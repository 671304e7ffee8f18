"""The field's binners for `bench/bins.py`, each loaded from its own installed wheel.

Each loader returns a `Binner`: `prepare` builds the peer's native input from the lengths (not
timed), `call` is the peer's own function on it (timed), `bins` reads its output back as the
lengths of each bin. Files whose package `__init__` pulls a training stack are executed alone
(`thd_packing.peers._wheel`), with stubs for the package's other imports during that import
only; no peer code is copied here. A missing wheel is a `PeerMissing` naming what to install.
"""

from __future__ import annotations

import importlib.metadata
import logging
import types
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal

import numpy as np
import torch

from thd_packing.peers import _wheel

Lengths = np.ndarray  # 1-D int64
BinsOut = tuple[np.ndarray, np.ndarray]  # the lengths in bin order, the item count of each bin
_HINT = "`nox -s bench_bins` installs it"


class PeerMissing(RuntimeError):
    """A peer's wheel (or a library its function needs) is not installed."""


@dataclass
class Binner:
    """One contender: native input from lengths and a capacity, the timed call, its bins."""

    name: str
    prepare: Callable[[Lengths, int], Any]
    call: Callable[[Any], Any]
    bins: Callable[[Any, Lengths], BinsOut]
    cost: str = "tokens"  # "rows": the capacity counts plan rows (impl only)
    # False for the micro-batch balancers: their Karmarkar-Karp holds n states of one set per
    # bin (memory n x bins), so they bin a step, not a dataset
    dataset: bool = True


def from_indices(groups: Sequence[Sequence[int]], lengths: Lengths) -> BinsOut:
    """Bins given as lists of example indices."""
    flat = np.fromiter(chain.from_iterable(groups), dtype=np.int64)
    return lengths[flat], np.array([len(g) for g in groups], dtype=np.int64)


def from_values(groups: Sequence[Sequence[Any]]) -> BinsOut:
    """Bins given as lists of the lengths themselves."""
    flat = np.fromiter(chain.from_iterable(groups), dtype=np.int64)
    return flat, np.array([len(g) for g in groups], dtype=np.int64)


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _locate(dist: str, path: str) -> Any:
    try:
        return _wheel.locate(dist, path, _HINT)[0]
    except RuntimeError as exc:
        raise PeerMissing(str(exc)) from None


def load_areal() -> types.ModuleType:
    """AReaL's `areal/utils/seqpack.py` alone: numba stubbed (`ffd_allocate` and
    `kk_allocate` are plain Python; only `partition_balanced`, unused here, is jitted)."""
    path = _locate("areal", "areal/utils/seqpack.py")
    numba = _wheel.stub_module("numba", {"njit": lambda f: f})
    log = _wheel.stub_module("areal.utils.logging", {"getLogger": logging.getLogger})
    stubs = {"numba": numba, "areal": _wheel.stub_module("areal", package=True),
             "areal.utils": _wheel.stub_module("areal.utils", {"logging": log}, package=True),
             "areal.utils.logging": log}
    return _wheel.exec_file(path, "_thd_bench_areal_seqpack", stubs)


def load_verl() -> types.ModuleType:
    """verl's `verl/utils/seqlen_balancing.py` alone. `index_select_tensor_dict` (the copy of
    each micro-batch's data, not part of the binning) returns the indices it is given."""
    path = _locate("verl", "verl/utils/seqlen_balancing.py")
    tu = _wheel.stub_module("verl.utils.tensordict_utils",
                            {"index_select_tensor_dict": lambda batch, index: index})
    device = _wheel.stub_module("verl.utils.device", {"get_device_name": lambda: "cpu"})
    stubs = {"verl": _wheel.stub_module("verl", package=True),
             "verl.protocol": _wheel.stub_module("verl.protocol", {"DataProto": object}),
             "verl.utils": _wheel.stub_module("verl.utils", {"tensordict_utils": tu,
                                                             "device": device}, package=True),
             "verl.utils.tensordict_utils": tu, "verl.utils.device": device}
    return _wheel.exec_file(path, "_thd_bench_verl_seqlen_balancing", stubs)


def load_trl_pack_bfd() -> Callable[..., Any]:
    """TRL's `_pack_bfd` (and its `_SegmentTree`) compiled from `trl/data_utils.py`, whose
    module imports datasets and transformers."""
    path = _locate("trl", "trl/data_utils.py")
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.types
    except ImportError:
        raise PeerMissing(f"TRL's _pack_bfd needs pyarrow; {_HINT}") from None
    namespace: dict[str, Any] = {"pa": pa, "pc": pc, "pyarrow": pyarrow, "np": np,
                                 "defaultdict": defaultdict, "deque": deque, "Literal": Literal}
    _wheel.load_function(path, "_check_if_columns_can_be_packed", namespace)
    namespace["_SegmentTree"] = _wheel.load_class(path, "_SegmentTree", namespace)
    return _wheel.load_function(path, "_pack_bfd", namespace)  # type: ignore[no-any-return]


def trl_table(lengths: Lengths) -> Any:
    """One `input_ids` list column of int8 zeros (1 byte a token, the smallest real column;
    TRL's real ids are wider, so its data movement here is a lower bound)."""
    import pyarrow as pa

    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.array(np.zeros(int(offsets[-1]), dtype=np.int8))
    return pa.table({"input_ids": pa.LargeListArray.from_arrays(pa.array(offsets), values)})


def _trl_bins(out: Any, lengths: Lengths) -> BinsOut:
    column = out["seq_lengths"].combine_chunks()
    return (column.values.to_numpy().astype(np.int64),
            np.diff(column.offsets.to_numpy()).astype(np.int64))


def trl_binners() -> list[Binner]:
    """TRL `_pack_bfd` on the whole input, and per 1,000 examples as `pack_dataset` calls it
    (`datasets`' batched `map`, default batch size)."""
    pack_bfd = load_trl_pack_bfd()

    def per_batch(table: Any, capacity: int, batch: int = 1000) -> list[Any]:
        return [pack_bfd(table.slice(i, batch), capacity)
                for i in range(0, table.num_rows, batch)]

    def batches_bins(outs: Any, lengths: Lengths) -> BinsOut:
        parts = [_trl_bins(out, lengths) for out in outs]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    return [
        Binner("trl _pack_bfd", lambda x, c: (trl_table(x), c),
               lambda a: pack_bfd(a[0], a[1]), _trl_bins),
        Binner("trl _pack_bfd per 1000", lambda x, c: (trl_table(x), c),
               lambda a: per_batch(a[0], a[1]), batches_bins),
    ]


def areal_binners() -> list[Binner]:
    seqpack = load_areal()
    return [
        Binner("areal ffd_allocate", lambda x, c: (x.tolist(), c),
               lambda a: seqpack.ffd_allocate(a[0], a[1], 1), lambda out, x: from_indices(out, x)),
        Binner("areal kk_allocate", lambda x, c: (x.tolist(), c),
               lambda a: seqpack.kk_allocate(a[0], a[1], 1), lambda out, x: from_indices(out, x),
               dataset=False),
    ]


def verl_batch(lengths: Lengths) -> dict[str, Any]:
    """The batch `rearrange_micro_batches` reads: jagged nested `input_ids` (values unread)."""
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    torch.cumsum(torch.from_numpy(lengths), 0, out=offsets[1:])
    values = torch.zeros(int(offsets[-1]), dtype=torch.int64)
    return {"input_ids": torch.nested.nested_tensor_from_jagged(values, offsets)}


def verl_binners() -> list[Binner]:
    """verl's micro-batch rule: `rearrange_micro_batches` (count from ceil(total / budget), KK
    on the workload model, the count raised until every micro-batch fits; no DP group)."""
    module = load_verl()
    return [Binner("verl rearrange_micro_batches", lambda x, c: (verl_batch(x), c),
                   lambda a: module.rearrange_micro_batches(a[0], a[1])[1],
                   lambda out, x: from_indices(out, x), dataset=False)]


def binpacking_binners() -> list[Binner]:
    try:
        import binpacking
    except ImportError:
        raise PeerMissing(f"binpacking is not installed; {_HINT}") from None
    return [Binner("binpacking to_constant_volume", lambda x, c: (x.tolist(), c),
                   lambda a: binpacking.to_constant_volume(a[0], a[1]),
                   lambda out, x: from_values(out))]


def llamafactory_binners() -> list[Binner]:
    """LLaMA-Factory's `greedy_knapsack` (its file imports only the standard library at run
    time); it sorts and pops its argument, so each call gets a fresh list."""
    path = _locate("llamafactory", "llamafactory/data/processor/processor_utils.py")
    module = _wheel.exec_file(path, "_thd_bench_llamafactory_processor_utils", {})
    return [Binner("llamafactory greedy_knapsack", lambda x, c: (x.tolist(), c),
                   lambda a: module.greedy_knapsack(list(a[0]), a[1]),
                   lambda out, x: from_values(out))]


LOADERS: dict[str, Callable[[], list[Binner]]] = {
    "trl": trl_binners, "areal": areal_binners, "verl": verl_binners,
    "binpacking": binpacking_binners, "llamafactory": llamafactory_binners,
}


def load_peers(names: Sequence[str]) -> tuple[list[Binner], dict[str, str]]:
    """The binners of every named peer that loads, and why each other one did not."""
    binners: list[Binner] = []
    missing: dict[str, str] = {}
    for name in names:
        try:
            binners += LOADERS[name]()
        except PeerMissing as exc:
            missing[name] = str(exc)
    return binners, missing
