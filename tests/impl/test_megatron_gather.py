"""impl's Megatron adapter in one process: postprocess_thd_engine on every CP rank with its
all_gather answered in this process, and under a megatron-core newer than the installed one
(`cp_partition_mode`, dynamic CP groups), simulated (spec section 12), through the suite's checks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from thd_packing import reference
from thd_packing.conformance.compare import (
    check_local_grad,
    names_field,
    names_number,
    outcome,
    same_bits,
)
from thd_packing.conformance.protocol import CONVENTION_CAPABILITIES, plain_meta
from thd_packing.conformance.running import ref_config, run_reference
from thd_packing.conformance.strategies import Batch, PackCase, batches, configs, pack_cases
from thd_packing.conformance.under_test import RuleViolation

pytest.importorskip("megatron.core")
from ._impl_api import CAPS as ALL_CAPS  # noqa: E402
from ._impl_api import IMPL, ci_settings  # noqa: E402

pytestmark = pytest.mark.usefixtures("suite_target")
# The Megatron view keeps verl's convention: spec 1.1's other conventions are not drawn.
CAPS = ALL_CAPS - CONVENTION_CAPABILITIES
# The engine functions also take spec 1.1's static metadata (keyword-only, R-MEG-10).
PRE_CAPS = CAPS | {"static_metadata"}


@pytest.mark.rules("R-MEG-3", "R-UNPACK-1", "R-UNPACK-2", "R-UNPACK-3", "R-MEG-10")
@ci_settings(0.5)
@example(PackCase(config={"cp_size": 2}, batch=Batch((5, 0, 13, 1), trail=(3,),
                                                      dtype="float32", seed=1)))
@example(PackCase(config={"cp_size": 4, "cp_layout": "contiguous", "tp_size": 3},
                  batch=Batch((40, 7, 0), dtype="float64", seed=2)))
@example(PackCase(config={"cp_size": 3, "fp8": True, "bucket": 96},
                  batch=Batch((0, 17), trail=(2,), dtype="int64", seed=3)))
@given(pack_cases(caps=frozenset({"contiguous"}), need_roll=False,
                  config=configs(caps=PRE_CAPS, cp=st.integers(2, 5)),
                  batch=batches(max_batch=10, budget=300, caps=PRE_CAPS,
                                dtypes=("float32", "float64", "int64", "bool"))))
def test_postprocess_every_rank_in_process(case: PackCase) -> None:
    """postprocess_thd_engine on every CP rank, its all_gather answered in this process with
    every rank's reference rows: each rank gets the whole batch back, bit for bit, its own rows
    carry gradient 1 where real and 0 where padding, and the gather goes over the CP group it
    was given. The same check as the distributed one, without processes, so that every example
    and layout is cheap."""
    seqs = case.batch.arrays()
    cfg = ref_config(case.config)
    plan = reference.plan_thd(list(case.batch.lengths), cfg)
    shards = [reference.pack_thd(seqs, cfg, r)[0] for r in range(case.cp_size)]
    want = reference.unpack_thd(shards, plan, cfg)
    for rank in range(case.cp_size):
        outs, grad = IMPL.gathered_unpack(shards, plain_meta(plan), dict(case.config), rank)
        assert len(outs) == len(want), f"rank {rank}: {len(outs)} sequences, spec {len(want)}"
        for i, (g, w) in enumerate(zip(outs, want, strict=True)):
            assert same_bits(np.asarray(g), w), \
                f"rank {rank} sequence {i}: {np.asarray(g)!r}, spec {w!r}"
        check_local_grad(grad, plan, cfg, rank, str(case))


@pytest.mark.rules("R-MEG-1", "R-MEG-2", "R-SHARD-3")
@ci_settings(0.5)
@example(PackCase(config={"cp_size": 2, "cp_layout": "contiguous"}, batch=Batch((5, 3))))
@given(pack_cases(caps=frozenset({"contiguous"}), need_roll=False,
                  config=configs(caps=CAPS, cp=st.integers(2, 4)).filter(
                      lambda c: c["cp_layout"] == "contiguous"),
                  batch=batches(max_batch=8, budget=200, caps=CAPS)))
def test_contiguous_with_cp_partition_mode(case: PackCase) -> None:
    """Under a megatron-core whose PackedSeqParams has cp_partition_mode (simulated where the
    installed one lacks it), contiguous cp > 1 is accepted,
    the field says 'contiguous', and every rank's rows are the spec's contiguous shards."""
    seqs = case.batch.arrays()
    want = run_reference(case, seqs)
    for rank in range(case.cp_size):
        rows, params, _ = IMPL.megatron_preprocess_newer(seqs, dict(case.config), rank)
        if params.get("cp_partition_mode") != "contiguous":
            raise RuleViolation(f"rank {rank}: cp_partition_mode "
                                f"{params.get('cp_partition_mode')!r}", {"R-MEG-2"})
        assert same_bits(rows[0], want[rank].rows), f"rank {rank}: rows differ from the spec"


@pytest.mark.rules("R-MEG-1", "R-MEG-3")
@ci_settings(0.5)
@example(PackCase(config={"cp_size": 2}, batch=Batch((5, 0, 3), trail=(2,), dtype="float32")))
@given(pack_cases(caps=frozenset({"contiguous"}), need_roll=False,
                  config=configs(caps=CAPS, cp=st.integers(2, 4)),
                  batch=batches(max_batch=8, budget=200, dtypes=("float32", "int64"),
                                caps=CAPS)))
def test_dynamic_cp_simulated(case: PackCase) -> None:
    """Dynamic context parallel (verl's `local_cp_size`) under a simulated megatron-core that has
    `get_dynamic_data_context_parallel_groups`, with Megatron's
    static CP size set to 1: preprocess packs the shards of cp_size = local_cp_size and hands
    local_cp_size and the dynamic group to PackedSeqParams; postprocess gathers over that group
    and returns the batch, the local rows in the autograd graph."""
    seqs = case.batch.arrays()
    want = run_reference(case, seqs)
    cfg = ref_config(case.config)
    plan = reference.plan_thd(list(case.batch.lengths), cfg)
    shards = [want[r].rows for r in range(case.cp_size)]
    expected = reference.unpack_thd(shards, plan, cfg)
    for rank in range(case.cp_size):
        rows, params, _ = IMPL.megatron_preprocess_newer(seqs, dict(case.config), rank,
                                                         dynamic=True)
        assert same_bits(rows[0], want[rank].rows), f"rank {rank}: rows differ from the spec"
        assert params["dynamic_group_ok"], \
            f"rank {rank}: PackedSeqParams lack local_cp_size or the dynamic CP group"
        outs, grad = IMPL.gathered_unpack_dynamic(shards, plain_meta(plan),
                                                  dict(case.config), rank)
        assert len(outs) == len(expected)
        for i, (g, w) in enumerate(zip(outs, expected, strict=True)):
            assert same_bits(np.asarray(g), w), f"rank {rank} sequence {i} differs"
        check_local_grad(grad, plan, cfg, rank, str(case))


@pytest.mark.rules("R-MEG-3", "R-ERR-11")
def test_postprocess_rejects_indivisible_total() -> None:
    """PackedSeqParams whose padded total is not divisible by cp_size (a forged plan) make
    postprocess raise ValueError naming cp_size and the total, before gathering
   ."""
    meta = {"seqlens": np.array([3], np.int32), "seqlens_padded": np.array([5], np.int32),
            "cu_seqlens": np.array([0, 3], np.int32),
            "cu_seqlens_padded": np.array([0, 5], np.int32), "max_seqlen": 5, "total": 5,
            "local_rows": 2}
    shards = [np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32)]
    got = outcome(lambda: IMPL.gathered_unpack(shards, meta, {"cp_size": 2}, 0))
    if not isinstance(got, ValueError) or not names_field("cp_size", str(got)) or \
            not names_number(5, str(got)):
        raise RuleViolation(f"postprocess with padded total 5 and cp_size 2: expected "
                            f"ValueError naming cp_size and 5, got {got!r}", {"R-ERR-11"})
