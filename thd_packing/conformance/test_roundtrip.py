"""Unpack: the target's unpack of the target's pack returns the input (spec section 9)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from thd_packing import reference

from .compare import same_bits
from .protocol import plain_meta
from .running import call_target, ref_config, run_reference, run_target
from .strategies import Batch, PackCase, batches, configs, pack_cases
from .under_test import (
    RuleViolation,
    TargetError,
    assume_declared,
    caps,
    needs,
    prop_settings,
    target,
)

CAPS = caps()


def _assert_batch_equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    if not isinstance(got, list | tuple):
        raise TargetError(f"unpack returned {type(got).__name__}, not a list of arrays")
    assert len(got) == len(want), f"{len(got)} sequences back, {len(want)} in"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"sequence {i}: {g.dtype}{list(g.shape)} back, {w.dtype}{list(w.shape)} in"
        )
        if not same_bits(g, w):
            bad = int(np.flatnonzero(~np.all((g == w).reshape(len(g), -1)
                                             | (g != g).reshape(len(g), -1), axis=1))[0]) \
                if len(g) else 0
            raise AssertionError(f"sequence {i} row {bad}: {g[bad]!r} back, {w[bad]!r} in")


@needs("unpack")
@pytest.mark.rules("R-UNPACK-1", "R-UNPACK-2")
@prop_settings()
@example(PackCase(config={"cp_size": 2}, batch=Batch((0, 3, 0), trail=(2,))))
@example(PackCase(config={"cp_size": 1}, batch=Batch((1,))))  # one token in all
@example(PackCase(config={"cp_size": 2, "bucket": 6}, batch=Batch((3,))))  # erratum E-1
@example(PackCase(config={"cp_size": 2}, batch=Batch((0, 1), trail=(3,))))
@example(PackCase(config={"cp_size": 2}, batch=Batch((0, 0), trail=(2,))))  # no tokens at all
@given(pack_cases(caps=CAPS, need_roll=False))
def test_roundtrip(case: PackCase) -> None:
    """unpack(pack on every rank) is the input, bit for bit, zero-length sequences included."""
    assume_declared(case)
    seqs = case.batch.arrays()
    got = run_target(case, seqs)
    out = call_target("unpack", target().unpack, [g.rows for g in got], got[0].meta,
                      dict(case.config), rules={"R-UNPACK-1"})
    _assert_batch_equal(out, seqs)


@needs("unpack")
@pytest.mark.rules("R-UNPACK-3", "R-UNPACK-1")
@prop_settings(0.5)
@given(pack_cases(caps=CAPS, need_roll=False))
def test_unpack_ignores_padding(case: PackCase) -> None:
    """Garbage in every padding row never reaches the output."""
    seqs = case.batch.arrays()
    got = run_target(case, seqs)
    plan = run_reference(case, seqs)[0].meta
    cfg = ref_config(case.config)
    shards = []
    for rank, g in enumerate(got):
        if g.rows.shape[0] != plan.local_rows:
            raise RuleViolation(f"rank {rank} holds {g.rows.shape[0]} rows, spec "
                                f"{plan.local_rows}", {"R-META-5"})
        rows = g.rows.copy()
        for k, src in enumerate(reference.row_map(plan, cfg, rank)):
            if not src.real:
                rows[k] = True if rows.dtype.kind == "b" else 77
        shards.append(rows)
    _assert_batch_equal(call_target("unpack", target().unpack, shards, got[0].meta,
                                    dict(case.config), rules={"R-UNPACK-1"}), seqs)


@needs("unpack")
@pytest.mark.rules("R-UNPACK-1")
@prop_settings(0.5)
@given(configs(caps=CAPS), batches(max_batch=16, budget=600, caps=CAPS),
       st.integers(0, 1000))
def test_unpack_matches_reference(config: dict, batch: Batch, seed: int) -> None:
    """Unpack of arbitrary shards (not made by pack) equals the reference's unpack."""
    cfg = ref_config(config)
    plan = reference.plan_thd(list(batch.lengths), cfg)
    rng = np.random.default_rng(seed)
    trail = batch.trail
    shards = [(rng.integers(-50, 50, size=(plan.local_rows, *trail))).astype(batch.dtype)
              for _ in range(cfg.cp_size)]
    want = reference.unpack_thd(shards, plan, cfg)
    meta = plain_meta(plan)
    _assert_batch_equal(call_target("unpack", target().unpack, [s.copy() for s in shards],
                                    meta, dict(config), rules={"R-UNPACK-1"}), list(want))
