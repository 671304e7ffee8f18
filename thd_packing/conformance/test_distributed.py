"""A real torch.distributed check: cp_size processes, gloo on 127.0.0.1, a real all_gather.

Each rank packs its own shard and unpacks through the target's distributed path (for impl:
impl/megatron.py's postprocess_thd_engine under a fake parallel state whose CP group is the
live gloo group). The output is compared with the reference, and for float data the gradient
of the output with respect to the local rows proves that the local part stays in the autograd
graph (R-MEG-3).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from thd_packing import reference

from . import gloo
from ._packed_cases import MaskCase
from .compare import check_local_grad, same_bits
from .running import ref_config
from .strategies import Batch, PackCase
from .under_test import caps, needs, target_spec

TIMEOUT_S = 60


def _cases(cp: int, layout: str) -> list[PackCase]:
    base = {"cp_size": cp, "cp_layout": layout}
    return [
        PackCase(config=base, batch=Batch((5, 0, 13, 1), trail=(3,), dtype="float32", seed=1)),
        PackCase(config={**base, "tp_size": 3},
                 batch=Batch((40, 7, 0), dtype="float64", seed=2)),
        PackCase(config={**base, "fp8": True},
                 batch=Batch((0, 17), trail=(2,), dtype="int64", seed=3)),
        PackCase(config=base, batch=Batch((3,), dtype="float32", seed=4)),
    ]


def _packed_cases(cp: int) -> list[MaskCase]:
    return [MaskCase(1, cp, False, 9, (4, 0, 9), "left", trail=(3,), dtype="float32", seed=1),
            MaskCase(3, cp, True, 11, (7, 2), "scattered", dtype="float32", seed=2),
            MaskCase(2, cp, False, 6, (6, 1, 3), "right", dtype="int64", seed=3)]


WORLD = 4  # cp 2 holds two CP groups in it, cp 4 one
CPS = (2, 4)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, Any]]]:
    """One gloo world of WORLD processes for every case of this module, started once: per cp,
    each rank's results (or the error it met). Both layouts share it (the contiguous one where
    the target supports it), and the mask cases where the target has verl's entry points."""
    layouts = ["zigzag", "contiguous"] if "contiguous" in caps() else ["zigzag"]
    parts: list[dict[str, Any]] = [
        {"cp": cp, "cases": [case for layout in layouts for case in _cases(cp, layout)],
         "packed": _packed_cases(cp) if "packed_seqs" in caps() else []} for cp in CPS]
    job = {"timeout": TIMEOUT_S, "target": target_spec(), "parts": parts}
    results = gloo.launch("thd_packing.conformance._distributed", job,
                          tmp_path_factory.mktemp("world"), WORLD, TIMEOUT_S * 2)
    return {part["cp"]: [data["parts"][i] if "parts" in data else data for data in results]
            for i, part in enumerate(parts)}


def _part(world: dict[int, list[dict[str, Any]]], cp: int) -> list[dict[str, Any]]:
    """Each rank's results at `cp`; a rank's error fails the test that reads it."""
    for rank, data in enumerate(world[cp]):
        assert "error" not in data, f"rank {rank} failed:\n{data['error']}"
    return world[cp]


@needs("distributed")
@pytest.mark.rules("R-MEG-3", "R-UNPACK-1", "R-UNPACK-2")
@pytest.mark.parametrize("cp", CPS, ids=["cp2-two-groups", "cp4"])
def test_distributed_unpack(world: dict[int, list[dict[str, Any]]], cp: int) -> None:
    """Every rank gets the whole batch back through a real all_gather over its CP group; its
    own rows carry gradient 1 where real and 0 where padding. With cp 2 the world of 4 holds
    two CP groups, so gathering over the default group instead of the CP group fails."""
    layouts = ["zigzag", "contiguous"] if "contiguous" in caps() else ["zigzag"]
    cases = [case for layout in layouts for case in _cases(cp, layout)]
    results = _part(world, cp)
    for index, case in enumerate(cases):
        seqs = case.batch.arrays()
        cfg = ref_config(case.config)
        plan = reference.plan_thd(list(case.batch.lengths), cfg)
        shards = [reference.pack_thd(seqs, cfg, r)[0] for r in range(cp)]
        want = reference.unpack_thd(shards, plan, cfg)
        for world_rank, data in enumerate(results):
            rank = world_rank % cp
            got = data["results"][index]
            outs = got["outputs"]
            assert len(outs) == len(want), f"case {case}: rank {rank} got {len(outs)} sequences"
            for i, (g, w) in enumerate(zip(outs, want, strict=True)):
                assert same_bits(np.asarray(g), w), (
                    f"case {case}: rank {rank} sequence {i}: {np.asarray(g)!r}, spec {w!r}"
                )
            check_local_grad(got["grad"], plan, cfg, rank, f"case {case}")


@needs("distributed", "packed_seqs")
@pytest.mark.rules("R-MEG-8", "R-MEG-9")
@pytest.mark.parametrize("cp", CPS, ids=["cp2-two-groups", "cp4"])
def test_distributed_packed_seqs(world: dict[int, list[dict[str, Any]]], cp: int) -> None:
    """preprocess_packed_seqs / postprocess_packed_seqs on every rank with a real all_gather
    over its CP group (two groups in a world of 4 at cp 2): every rank gets the padded batch
    back at the mask's True entries, and its own rows carry gradient 1 where real."""
    packed = _packed_cases(cp)
    results = _part(world, cp)
    for index, case in enumerate(packed):
        values, mask = case.arrays()
        want = np.where(mask.reshape(*mask.shape, *([1] * len(case.trail))), values, 0)
        cfg = case.ref_config()
        plan = reference.plan_thd(list(case.lengths), cfg)
        for world_rank, data in enumerate(results):
            rank = world_rank % cp
            got = data["packed"][index]
            assert same_bits(np.asarray(got["output"]), want.astype(values.dtype)), \
                f"case {case}: rank {rank} got {np.asarray(got['output']).tolist()}"
            check_local_grad(got["grad"], plan, cfg, rank, f"case {case}")
