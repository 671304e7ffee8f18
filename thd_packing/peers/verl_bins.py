"""Binner targets over verl 0.9.1's `verl/utils/seqlen_balancing.py`, from its wheel.

The file is executed on its own (verl's package `__init__` pulls in a training stack) with
stubs standing in for `verl.protocol` (`DataProto`, read only by `prepare_dynamic_batch`),
`verl.utils.device` (read only when the count is all-reduced over a DP group) and
`verl.utils.tensordict_utils`, whose `index_select_tensor_dict` slices the micro-batches' data
(not the index lists judged here) and needs `tensordict`, not installed: a dict of tensors and
a row selection stand in for it.

- `VerlMicroBatches`: `rearrange_micro_batches`, as verl's engines call it on one rank
  (`dp_group=None`): the count `min(n, ceil(sum / max_token_len))`, raised to
  `min_num_micro_batch`, rounded up to `num_batches_divided_by`, then raised by that step until
  the Karmarkar-Karp partition of the workload model (`24576 L + L^2`) has every part within
  `max_token_len` tokens; the parts reordered by workload (`use_dynamic_bsz_balance`). It claims
  no spec algorithm: its docstring claims to "split a batch into micro-batches by total token
  count" and to "balance the computational workload", which is Karmarkar-Karp on workloads,
  not on the sizes R-BIN-15 partitions.
- `VerlBalancedPartitions`, `VerlKarmarkarKarp`, `VerlGreedyPartition`: the partitioners
  `get_seqlen_balanced_partitions`, `karmarkar_karp` and `greedy_partition`, which take a part
  count `k`, not a capacity. They are driven the way `rearrange_micro_batches` drives its
  partitioner, with the token lengths as the weights: `k` from verl's own `ceildiv` and
  `roundup_divisible`, then raised by `bins_multiple_of` until every part fits (what R-BIN-15
  states). `get_seqlen_balanced_partitions` and `karmarkar_karp` claim Karmarkar-Karp ("Uses
  the Karmarkar-Karp differencing method"; "the Largest Differencing Method"), so they are
  judged against R-BIN-15; `greedy_partition` claims "a greedy assignment strategy" (each item,
  in input order, to the part of smallest sum) and no spec algorithm.

Not expressible: `cost="rows"` (verl counts attention-mask tokens), overflow other than
`reject`, `order="placement"` for the sorted parts, the DP all-reduce of the count
(`dp_group`) and `force_group_size`. Findings: docs/findings/bins-verl.md.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from thd_packing.conformance.bins_protocol import BinDeclared, Binned

from . import _bins, _wheel
from ._wiring import fixed, no_effect, not_wired, wired

EXPECTED_VERSION = "0.9.1"
PATH = "verl/utils/seqlen_balancing.py"
_HINT = "install verl==0.9.1 --no-deps"
_COUNTS = frozenset({"min_bins", "bins_multiple_of"})


def _index_select(batch: Mapping[str, torch.Tensor], indices: Any) -> dict[str, torch.Tensor]:
    """Glue for `tensordict_utils.index_select_tensor_dict`: the rows of each tensor."""
    rows = torch.as_tensor(indices, dtype=torch.long)
    return {key: value[rows] for key, value in batch.items()}


def load_module() -> tuple[types.ModuleType, str]:
    """`seqlen_balancing.py` of the installed verl wheel, executed with stubs."""
    path, version = _wheel.locate("verl", PATH, _HINT)
    s = _wheel.stub_module
    tu = s("verl.utils.tensordict_utils", {"index_select_tensor_dict": _index_select})
    stubs = {"verl": s("verl", package=True),
             "verl.protocol": s("verl.protocol", {"DataProto": object}),
             "verl.utils": s("verl.utils", {"tensordict_utils": tu}, package=True),
             "verl.utils.tensordict_utils": tu,
             "verl.utils.device": s("verl.utils.device", callables=("get_device_name",))}
    return _wheel.exec_file(path, "_thd_conformance_verl_seqlen_balancing", stubs), version


@functools.cache
def module() -> tuple[types.ModuleType, str]:
    """The loaded module, once per process."""
    return load_module()


class VerlMicroBatches:
    """`rearrange_micro_batches(batch, max_token_len, ...)` on one rank; the index lists it
    returns are the bins."""

    name = "verl-micro-batches"
    declared_bins = BinDeclared(

        order="input",
        features=frozenset({"min_bins", "bins_multiple_of"}),
        validated_elsewhere=frozenset({"lengths"}),
        notes={"lengths": "attention-mask row sums: non-negative integers by construction",
               "bin order": "by workload, smallest at both ends (use_dynamic_bsz_balance)"},
    )

    def __init__(self) -> None:
        self.module, self.version = module()

    def bin(self, lengths: np.ndarray, config: Mapping[str, Any]) -> Binned:
        c = _bins.read_config(config, target=self.name, algorithm=None, order="input",
                              counts=_COUNTS)
        array = np.asarray(lengths)
        if array.dtype.kind not in "iu":
            raise TypeError(f"{self.name}: lengths become an attention mask, got {array.dtype}")
        lens = torch.as_tensor(array.astype(np.int64))
        width = int(lens.max()) if len(lens) else 0
        mask = (torch.arange(width)[None, :] < lens[:, None]).long()
        batch = {"input_ids": torch.zeros_like(mask), "attention_mask": mask}
        _, indices = self.module.rearrange_micro_batches(
            batch, max_token_len=c["capacity"], dp_group=None,
            num_batches_divided_by=c["bins_multiple_of"] if c["bins_multiple_of"] > 1 else None,
            same_micro_num_in_dp=True,
            min_num_micro_batch=c["min_bins"] if c["min_bins"] > 1 else None,
            use_dynamic_bsz_balance=True, force_group_size=1)
        return Binned(bins=indices)


class _Partitioner:
    """A k-way partitioner driven by the micro-batch count rule of `rearrange_micro_batches`,
    the token lengths as its weights. The partitioner never sees the capacity, so the capacity
    is declared validated elsewhere (by the count rule, judged in `VerlMicroBatches`)."""

    name = ""
    function = ""
    claims: str | None = None
    order = "input"
    declared_bins = BinDeclared()

    def __init__(self) -> None:
        self.module, self.version = module()
        self.partition: Callable[..., Any] = getattr(self.module, self.function)

    def bin(self, lengths: np.ndarray, config: Mapping[str, Any]) -> Binned:
        c = _bins.read_config(config, target=self.name, algorithm=self.claims,
                              order=self.order, counts=_COUNTS)
        values = [int(v) for v in lengths]
        capacity, step = c["capacity"], c["bins_multiple_of"]
        k = min(len(values), self.module.ceildiv(sum(values), capacity))
        k = max(c["min_bins"], k) if c["min_bins"] > 1 else k
        k = self.module.roundup_divisible(k, step) if step > 1 else k
        while True:
            if k > len(values):
                raise ValueError(f"{self.name}: {len(values)} lengths cannot fill {k} "
                                 f"non-empty parts (capacity={capacity})")
            parts = self.partition(values, k, False)
            if all(sum(values[i] for i in part) <= capacity for part in parts):
                return Binned(bins=parts)
            k += step


class VerlBalancedPartitions(_Partitioner):
    """`get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size=False)`."""

    name = "verl-balanced-partitions"
    function = "get_seqlen_balanced_partitions"
    claims = "karmarkar_karp"
    declared_bins = BinDeclared(algorithms=frozenset({"karmarkar_karp"}), order="input",
                                features=frozenset({"min_bins", "bins_multiple_of"}),
                                validated_elsewhere=frozenset({"capacity"}))


class VerlKarmarkarKarp(_Partitioner):
    """`karmarkar_karp(seqlen_list, k_partitions, equal_size=False)`: parts unsorted."""

    name = "verl-karmarkar-karp"
    function = "karmarkar_karp"
    claims = "karmarkar_karp"
    order = "placement"
    declared_bins = BinDeclared(algorithms=frozenset({"karmarkar_karp"}), order="placement",
                                features=frozenset({"min_bins", "bins_multiple_of"}),
                                validated_elsewhere=frozenset({"capacity"}))


class VerlGreedyPartition(_Partitioner):
    """`greedy_partition(seqlen_list, k_partitions, equal_size=False)`."""

    name = "verl-greedy-partition"
    function = "greedy_partition"
    claims = None
    declared_bins = BinDeclared( order="input",
                                features=frozenset({"min_bins", "bins_multiple_of"}),
                                validated_elsewhere=frozenset({"capacity"}))


TARGETS = (VerlMicroBatches, VerlBalancedPartitions, VerlKarmarkarKarp, VerlGreedyPartition)

_K = wired("capacity, min_bins, bins_multiple_of: k from rearrange_micro_batches' count rule "
           "(ceildiv, roundup_divisible), raised by bins_multiple_of until every part fits")
_EQUAL = not_wired("equal_size=True (the same item count per part) is R-BIN-19's rank split "
                   "(R-BIN-20), not a bin step: no BinConfig field; the trainer's micro-batch "
                   "rule passes False (both values checked by hand against R-BIN-19 in "
                   "tests/peers/test_verl_bins.py)")
_MOD = "verl.utils.seqlen_balancing"
WIRING = {
    f"{_MOD}.rearrange_micro_batches": {
        "batch": wired("lengths, as the attention_mask row sums of a right-padded batch as "
                       "wide as the longest example (input_ids zeros)"),
        "max_token_len": wired("capacity"),
        "dp_group": not_wired("the count all-reduced (MAX) over DP ranks: the binner protocol "
                              "bins one rank's lengths (R-BIN-20 needs a multi-rank draw)"),
        "num_batches_divided_by": wired("bins_multiple_of (None at 1)"),
        "same_micro_num_in_dp": no_effect("read only together with a dp_group"),
        "min_num_micro_batch": wired("min_bins (None at 1)"),
        "use_dynamic_bsz_balance": fixed("True, verl's engine default: reorders the bins by "
                                         "workload, which no BinConfig field orders"),
        "force_group_size": not_wired("keeps runs of consecutive examples in one bin (reward "
                                      "model pairs): no BinConfig field"),
    },
    f"{_MOD}.get_seqlen_balanced_partitions": {
        "seqlen_list": wired("lengths (token counts as the weights)"),
        "k_partitions": _K,
        "equal_size": _EQUAL,
    },
    f"{_MOD}.karmarkar_karp": {
        "seqlen_list": wired("lengths (token counts as the weights)"),
        "k_partitions": _K,
        "equal_size": _EQUAL,
    },
    f"{_MOD}.greedy_partition": {
        "seqlen_list": wired("lengths (token counts as the weights)"),
        "k_partitions": _K,
        "equal_size": _EQUAL,
    },
}
