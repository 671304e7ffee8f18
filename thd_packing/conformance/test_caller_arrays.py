"""Arrays the caller keeps: read-only and broadcast (stride-0) inputs are valid arrays, and an
accepted call leaves them as they were (R-IN-6). A broadcast array is what
`np.broadcast_to` gives for a batch of equal lengths; a packer that writes into it (even the
same values, e.g. an in-place clamp) fails on it."""

from __future__ import annotations

import numpy as np
import pytest

from thd_packing import reference

from .compare import same_value, snapshot
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
    """A batch of read-only and broadcast arrays: every rank's rows are the reference's and
    the arrays are unchanged."""
    seqs = [np.broadcast_to(np.arange(3, dtype=np.int64), (5, 3)),
            _locked(np.arange(0, dtype=np.int64).reshape(0, 3)),
            _locked(np.arange(24, dtype=np.int64).reshape(8, 3))]
    config = with_convention(config)
    require_config(config, lengths=[5, 0, 8], trail=(3,))
    cfg = reference.PackConfig(**config)  # type: ignore[arg-type]
    before = snapshot(seqs)
    for rank in range(cfg.cp_size):
        want, _, _ = reference.pack_thd(seqs, cfg, rank)
        what = f"pack(read-only and broadcast arrays, config={config}, rank {rank})"
        try:
            rows, _, _ = target().pack(seqs, dict(config), rank)
        except Exception as exc:  # the rejection is the failure under test
            raise RuleViolation(f"{what}: valid arrays, rejected: {exc!r}",
                                {"R-IN-1", "R-IN-6"}) from exc
        if not same_value(np.asarray(rows), want):
            raise RuleViolation(f"{what}: rows differ from the spec's", {"R-ROW-1"})
        if snapshot(seqs) != before:
            raise RuleViolation(f"{what}: wrote into its inputs", {"R-IN-6"})
