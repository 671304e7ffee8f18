"""Arrays the caller keeps: read-only and broadcast (stride-0) inputs are valid arrays, and an
accepted call leaves them as they were (R-IN-6). A broadcast array is what
`np.broadcast_to` gives for a batch of equal lengths; a packer that writes into it (even the
same values, e.g. an in-place clamp) fails on it."""

from __future__ import annotations

import numpy as np
import pytest

from .compare import check_meta, same_value, snapshot
from .protocol import OutputRefused
from .running import RankResult, run_reference, run_reference_on_its_plan
from .strategies import Batch, PackCase
from .under_test import RuleViolation, require_config, target, with_convention

CONFIGS = ({"cp_size": 1}, {"cp_size": 2}, {"cp_size": 2, "tp_size": 3},
           {"cp_size": 3, "cp_layout": "contiguous"})


def _locked(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.setflags(write=False)
    return a


@pytest.mark.rules("R-IN-1", "R-IN-6", "R-ROW-1")
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in
                                                                  c.items()))
def test_batch_arrays_the_caller_keeps(config: dict[str, object]) -> None:
    """A batch of read-only and broadcast arrays: every rank's rows are the reference's, laid
    out on the plan the packer reports (a wrong plan is the plan rules' finding, not this
    test's), and the arrays are unchanged."""
    seqs = [np.broadcast_to(np.arange(3, dtype=np.int64), (5, 3)),
            _locked(np.arange(0, dtype=np.int64).reshape(0, 3)),
            _locked(np.arange(24, dtype=np.int64).reshape(8, 3))]
    config = with_convention(config)
    require_config(config, lengths=[5, 0, 8], trail=(3,))
    case = PackCase(config=config, batch=Batch((5, 0, 8), trail=(3,)))
    before = snapshot(seqs)
    what = f"pack(read-only and broadcast arrays, config={config}"
    got = []
    for rank in range(case.cp_size):
        try:
            rows, _, meta = target().pack(seqs, dict(config), rank)
        except OutputRefused:  # a failure of its own rule
            raise
        except Exception as exc:  # the rejection is the failure under test
            raise RuleViolation(f"{what}, rank {rank}): valid arrays, rejected: {exc!r}",
                                {"R-IN-1", "R-IN-6"}) from exc
        if snapshot(seqs) != before:
            raise RuleViolation(f"{what}, rank {rank}): wrote into its inputs", {"R-IN-6"})
        got.append(RankResult(np.asarray(rows), None, meta))
    want = run_reference(case, seqs)
    if all(same_value(g.rows, w.rows) for g, w in zip(got, want, strict=True)):
        return
    laid = run_reference_on_its_plan(case, seqs, got) if "cu_seqlens_padded" in got[0].meta \
        else None
    if laid is None:  # a plan the row map cannot lay out fails as a plan, not as rows
        check_meta(got, want, case.config)
    for rank, g in enumerate(got):
        if laid is None or not same_value(g.rows, laid[rank].rows):
            raise RuleViolation(f"{what}, rank {rank}): rows differ from the spec's"
                                f"{'' if laid is None else ' on the plan it reports'}",
                                {"R-ROW-1"})
