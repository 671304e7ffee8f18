"""The adapter against the verl 0.9.1 wheel itself, on a fixed random sweep of configurations.

verl's util.py is loaded on its own (peers/verl.py) with a `**kwargs`
PackedSeqParams stub, so its contiguous layout runs too. Every slot must agree, except where a
listed erratum applies: E-1 / E-2 change the plan (only with a bucket or `min_local_rows`, and
then the case is dropped after that check), E-3 / E-4 / E-5 single slots (`erratum_slots`). The
conformance suite's slot oracle (conformance/_megatron_slots.py) is held to verl's values here
as well.
"""

from __future__ import annotations

import importlib.metadata
import random
from typing import Any

import numpy as np
import pytest
import torch

from thd_packing import reference as ref

pytest.importorskip("megatron.core")
from megatron.core import packed_seq_params as psp_module  # noqa: E402
from megatron.core import parallel_state  # noqa: E402

from impl import megatron as adapter  # noqa: E402
from thd_packing.conformance._megatron_slots import slot_values  # noqa: E402
from thd_packing.conformance.targets._megatron_view import KwargsParams  # noqa: E402

from ._verl_errata import erratum_slots  # noqa: E402

try:
    importlib.metadata.distribution("verl")
    HAVE_VERL = True
except importlib.metadata.PackageNotFoundError:
    HAVE_VERL = False
needs_verl = pytest.mark.skipif(not HAVE_VERL, reason="verl is not installed (`nox -s tests` "
                                "installs verl==0.9.1 --no-deps)")


def _cases(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        out.append({
            "tp": rng.randint(1, 3), "cp": rng.randint(1, 4),
            "layout": rng.choice(["zigzag", "contiguous"]), "roll": rng.random() < 0.5,
            "fp8": rng.random() < 0.2, "bucket": rng.choice([None, None, 8, 12, 16]),
            "mlr": rng.choice([None, None, 4, 9]),
            "lengths": [rng.choice([0, rng.randint(1, 20)]) for _ in range(rng.randint(1, 5))],
        })
    return out


def _nested(lengths: list[int]) -> Any:
    return torch.nested.nested_tensor(
        [torch.arange(n) + 1000 * (i + 1) for i, n in enumerate(lengths)], layout=torch.jagged)


def _call(fn: Any, c: dict[str, Any]) -> tuple[list[int], list[int], list[int]]:
    rows, params, pos = fn(_nested(c["lengths"]), need_roll=c["roll"], cp_layout=c["layout"],
                           use_fp8_padding=c["fp8"], pad_to_length_bucket=c["bucket"],
                           min_local_rows=c["mlr"])
    return rows[0].tolist(), pos[0].tolist(), params.cu_seqlens_q_padded.tolist()


@needs_verl
@pytest.mark.rules("R-MEG-6", "R-MEG-7", "R-MEG-4")
def test_sweep_against_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    from thd_packing.peers.verl import FakeParallelState, load_util

    util = load_util(KwargsParams)
    state = FakeParallelState(1, 1, 0)
    monkeypatch.setattr(psp_module, "PackedSeqParams", KwargsParams)
    for name in ("tensor_model_parallel_world_size", "context_parallel_world_size",
                 "context_parallel_rank"):
        monkeypatch.setattr(parallel_state, f"get_{name}", getattr(state, f"get_{name}"))
    util.mpu = state
    compared = dropped = 0
    for c in _cases(seed=13, count=60):
        cfg = ref.PackConfig(tp_size=c["tp"], cp_size=c["cp"], cp_layout=c["layout"],
                             fp8=c["fp8"], bucket=c["bucket"], min_local_rows=c["mlr"])
        plan = ref.plan_thd(c["lengths"], cfg)
        seqs = [np.arange(n, dtype=np.int64) + 1000 * (i + 1)
                for i, n in enumerate(c["lengths"])]
        for rank in range(c["cp"]):
            state.tp, state.cp, state.rank = c["tp"], c["cp"], rank
            try:
                v_rows, v_pos, v_cu = _call(util.preprocess_thd_engine, c)
            except IndexError:
                # E-3: verl indexes row -1 of an empty zigzag buffer under need_roll
                assert c["roll"] and plan.total == 0 and c["layout"] == "zigzag"
                dropped += 1
                break
            if v_cu != plan.cu_seqlens_padded.tolist():
                assert c["bucket"] is not None or c["mlr"] is not None, c  # E-1, E-2 only
                dropped += 1
                break
            a_rows, a_pos, a_cu = _call(adapter.preprocess_thd_engine, c)
            assert a_cu == v_cu
            skip = erratum_slots(c["lengths"], cfg, rank, c["roll"])
            oracle = slot_values(seqs, cfg, rank, c["roll"])
            for k in range(len(v_rows)):
                where = f"{c} rank {rank} row {k}"
                if "value" not in skip.get(k, ()):
                    assert a_rows[k] == v_rows[k], where
                if "pos" not in skip.get(k, ()):
                    assert a_pos[k] == v_pos[k], where
                    if k in oracle:
                        assert oracle[k][0] == v_pos[k], where
                label = oracle.get(k, (0, None))[1]
                if label is not None and "value" not in skip.get(k, ()):
                    assert int(label) == v_rows[k], where
                compared += 1
    assert compared > 500 and dropped < 30, (compared, dropped)
