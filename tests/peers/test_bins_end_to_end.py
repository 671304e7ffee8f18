"""A binner feeding the packer its trainer feeds: verl's micro-batches (rearrange_micro_batches,
a real-token budget) into verl's own Megatron THD preprocess, both from the wheel.

Every example reaches exactly one pack and every pack meets the consumer contract; and the
budget counted in real tokens leaves packs over the same number in rows once the packer
aligns each sequence for tp and cp (spec/bins.md R-BIN-5, `cost="rows"`), where impl's binner
under `cost="rows"` keeps every pack within it.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import numpy as np
import pytest

import impl
from impl import bins as ib
from thd_packing.conformance.contract import check_pack
from thd_packing.conformance.running import RankResult

try:
    importlib.metadata.distribution("verl")
    importlib.metadata.distribution("megatron-core")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("verl and megatron-core are not installed (install verl==0.9.1 --no-deps)",
                allow_module_level=True)

from thd_packing.peers import verl, verl_bins  # noqa: E402

CAPACITY = 2048
PACK = {"tp_size": 2, "cp_size": 2}
LENGTHS = np.random.default_rng(16).integers(1, 700, size=48)  # 7 of 8 packs over in rows


def _pack_all(packer: Any, bins: list[list[int]]) -> list[int]:
    """Pack every bin with verl, check each pack's contract; each pack's total rows."""
    totals = []
    for b in bins:
        seqs = [np.arange(int(LENGTHS[i]), dtype=np.int64)[:, None] + 10_000 * (i + 1)
                for i in b]
        outputs = []
        for rank in range(PACK["cp_size"]):
            packed = packer.pack(seqs, PACK, rank)
            outputs.append(RankResult(packed.rows, packed.position_ids, packed.meta))
        check_pack(seqs, outputs, PACK)
        totals.append(int(outputs[0].meta["total"]))
    return totals


def test_verl_micro_batches_into_verl_thd() -> None:
    binner, packer = verl_bins.VerlMicroBatches(), verl.TARGET()
    bins = [list(b) for b in binner.bin(LENGTHS, {"capacity": CAPACITY}).bins]
    assert sorted(i for b in bins for i in b) == list(range(len(LENGTHS)))  # each once
    assert all(sum(int(LENGTHS[i]) for i in b) <= CAPACITY for b in bins)  # its own budget
    totals = _pack_all(packer, bins)
    assert max(totals) > CAPACITY  # tokens within the budget, rows beyond it
    # The same lengths binned in rows under the packer's alignment: every pack within it.
    config = ib.BinConfig(CAPACITY, cost="rows", pack=impl.PackConfig(**PACK))
    rows_bins = ib.bin_lengths(LENGTHS, config).indices()
    assert sorted(i for b in rows_bins for i in b) == list(range(len(LENGTHS)))
    assert max(_pack_all(packer, rows_bins)) <= CAPACITY
