"""The megatron-core target: megatron-core's THD sharder with SFT-style packing glue.

Expected values are hand-computed from the documented behaviour: Megatron-LM's SFTDataset pads
every document to a multiple of 2*cp and puts the end padding on the last document; TE's
thd_get_partitioned_indices gives rank r chunks r and 2cp-1-r of each segment.
"""

from __future__ import annotations

import megatron.core.utils as mcore_utils
import numpy as np
import pytest
import torch

from thd_packing.conformance.targets import load_target
from thd_packing.conformance.under_test import as_tuple
from thd_packing.peers.megatron_core import (
    MegatronCoreTarget,
    sft_plan,
    te_partition_from_reference,
)

A = np.array([11, 12, 13], dtype=np.int64)
B = np.array([21, 22, 23, 24, 25], dtype=np.int64)


@pytest.fixture(scope="module")
def target() -> MegatronCoreTarget:
    return load_target("megatron-core")


def test_the_code_under_test_is_megatron_cores(target: MegatronCoreTarget) -> None:
    assert target.mcore_utils is mcore_utils
    assert mcore_utils.get_thd_batch_on_this_cp_rank.__module__ == "megatron.core.utils"
    if mcore_utils.tex is None:
        assert "reference.partitioned_indices" in target.description
    else:
        assert "TransformerEngine's thd_get_partitioned_indices" in target.description


def test_sft_plan() -> None:
    # per document to 2*cp = 4: [4, 0, 8] = 12; the total a multiple of lcm(4, tp*cp = 8): 16,
    # the 4 extra rows on the last document
    assert sft_plan([3, 0, 5], tp=4, cp=2) == ([4, 0, 12], 16)
    assert sft_plan([3, 5], tp=1, cp=1) == ([3, 5], 8)
    assert sft_plan([3, 5], tp=2, cp=1) == ([3, 5], 8)
    assert sft_plan([3, 4], tp=2, cp=1) == ([3, 5], 8)


def test_te_partition_from_reference() -> None:
    # segments [0, 4) and [4, 12), cp 2: chunks of 1 and 2 rows; rank r takes chunks r, 3 - r
    cu = torch.tensor([0, 4, 12], dtype=torch.int32)
    assert te_partition_from_reference(cu, 12, 2, 0).tolist() == [0, 3, 4, 5, 10, 11]
    assert te_partition_from_reference(cu, 12, 2, 1).tolist() == [1, 2, 6, 7, 8, 9]
    with pytest.raises(ValueError):
        te_partition_from_reference(torch.tensor([0, 3], dtype=torch.int32), 3, 2, 0)


def test_zigzag_pack_through_megatron(target: MegatronCoreTarget) -> None:
    shards = [as_tuple(target.pack([A, B], {"cp_size": 2}, r)) for r in range(2)]
    # padded [4, 8]: rank 0 holds A[0], A's pad row, B[0:2], B's rows 6 and 7 (pads)
    assert shards[0][0].tolist() == [11, 0, 21, 22, 0, 0]
    assert shards[1][0].tolist() == [12, 13, 23, 24, 25, 0]
    # position ids are the offsets in the padded segment (SFT counts on into the padding)
    assert shards[0][1].tolist() == [0, 3, 0, 1, 6, 7]
    meta = shards[0][2]
    assert meta["cu_seqlens"].tolist() == [0, 3, 8]
    assert meta["cu_seqlens_padded"].tolist() == [0, 4, 12]
    assert (meta["total"], meta["local_rows"], meta["max_seqlen"]) == (12, 6, 8)
    # the stand-in is removed again after the call
    assert (mcore_utils.tex is None) == (not target.real_te)


def test_trailing_dims_pass_through(target: MegatronCoreTarget) -> None:
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    rows, _, meta = as_tuple(target.pack([x], {"cp_size": 2}, 1))
    assert rows.shape == (2, 2) and meta["total"] == 4
    assert rows.tolist() == [[2.0, 3.0], [4.0, 5.0]]  # chunk 1 = row 1, chunk 2 = row 2


def test_declined_features_raise_not_implemented(target: MegatronCoreTarget) -> None:
    for config in ({"bucket": 8}, {"fp8": True}, {"min_local_rows": 4},
                   {"cp_size": 2, "cp_layout": "contiguous"}):
        with pytest.raises(NotImplementedError):
            as_tuple(target.pack([A, B], config, 0))
    with pytest.raises(NotImplementedError):
        as_tuple(target.pack([A, B], {}, 0, need_roll=True))


def test_convention_is_seq_align_cp(target: MegatronCoreTarget) -> None:
    """Spec 1.1: documents aligned to 2 * cp, tp on the total only: the reference under
    seq_align='cp' gives the same plan (tp 2, cp 2, [1]: one segment of 4, not 8)."""
    from thd_packing import reference

    assert target.declared.convention == {"seq_align": "cp"}
    config = {"tp_size": 2, "cp_size": 2, "seq_align": "cp"}
    seqs = [np.arange(1, dtype=np.int64)]
    _, _, meta = as_tuple(target.pack(seqs, config, 0))
    plan = reference.plan_thd([1], reference.PackConfig(**config))
    assert meta["cu_seqlens_padded"].tolist() == plan.cu_seqlens_padded.tolist() == [0, 4]
    with pytest.raises(NotImplementedError):
        as_tuple(target.pack(seqs, {"seq_align": "tp_cp"}, 0))
    with pytest.raises(ValueError, match="seq_align"):
        as_tuple(target.pack(seqs, {"seq_align": "tp"}, 0))
    with pytest.raises(NotImplementedError):
        as_tuple(target.pack(seqs, {"tail": "segment"}, 0))
