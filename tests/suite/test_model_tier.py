"""The model tier fails, naming the token, on packers with a bug only a consumer sees
(model_fakes.py): position ids that do not restart, a segment boundary one row early, zigzag
segments that 2 * cp does not divide, a label that crosses into the next sequence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .runner import run_suite

MODEL = "thd_packing/conformance/test_model.py"
pytestmark = pytest.mark.slow  # a model world per test: `nox -s slow`


def _failure(report: dict[str, Any], test: str) -> dict[str, Any]:
    found = [t for t in report["tests"] if t["test"].endswith(test)]
    assert found, (test, report["_stdout"][-3000:])
    assert found[0]["status"] == "fail", found[0]
    return found[0]


def test_position_ids_that_do_not_restart(tmp_path: Path) -> None:
    """Ids 0..n-1 over the rank: the sdpa path sees one sequence; the first token after the
    first sequence attends to it (R-MODEL-1). The THD path reads no position id and passes."""
    report = run_suite("model_fakes:NoRestartTarget", tmp_path,
                       f"{MODEL}::test_model_position_ids", f"{MODEL}::test_model_thd")
    got = _failure(report, "test_model_position_ids")
    assert got["rules"] == ["R-MODEL-1"], got
    assert "sequence 2 token 0: log-probs differ" in got["message"], got["message"]
    assert "position id 5" in got["message"], got["message"]
    thd = [t for t in report["tests"] if t["test"].endswith("test_model_thd")]
    assert thd and thd[0]["status"] == "pass", thd


def test_segment_boundary_one_row_early(tmp_path: Path) -> None:
    """cu_seqlens_padded one row early at every inner boundary: the THD path reads the first
    sequence's last token as no slot and lets the next sequence attend to it (R-MODEL-2)."""
    report = run_suite("model_fakes:EarlyBoundaryTarget", tmp_path,
                       f"{MODEL}::test_model_thd")
    got = _failure(report, "test_model_thd")
    assert got["rules"] == ["R-MODEL-2"], got
    assert "token 4 of sequence 0 is read by no rank" in got["message"], got["message"]


def test_zigzag_segment_not_a_multiple_of_2cp(tmp_path: Path) -> None:
    """cp 2, lengths (5, 0, 13, 1) aligned to cp: segment 0 has 6 rows, TE's chunks of 1 row
    leave its last 2 (token 4) on no rank (R-MODEL-3)."""
    report = run_suite("model_fakes:CpAlignedZigzagTarget", tmp_path,
                       f"{MODEL}::test_model_context_parallel[cp2-zz]")
    got = _failure(report, "test_model_context_parallel[cp2-zz]")
    assert got["rules"] == ["R-MODEL-3"], got
    assert "token 4 of sequence 0 is read by no rank" in got["message"], got["message"]


def test_label_crossing_into_the_next_sequence(tmp_path: Path) -> None:
    """The label of a sequence's second-to-last token is the next sequence's first: the loss
    check names the token, its label and where that id occurs (R-MODEL-4), at cp 1 and under
    zigzag CP."""
    report = run_suite("model_fakes:CrossingLabelTarget", tmp_path,
                       f"{MODEL}::test_model_thd", f"{MODEL}::test_model_context_parallel[cp2-zz]")
    for test in ("test_model_thd", "test_model_context_parallel[cp2-zz]"):
        got = _failure(report, test)
        assert got["rules"] == ["R-MODEL-4"], got
        assert "sequence 0 token 3: the loss reads label id" in got["message"], got["message"]
        assert "token 0 of sequence 2" in got["message"], got["message"]


def test_flat_roll_label_read_through_the_loss_mask(tmp_path: Path) -> None:
    """Labels beside the rows from a flat roll with a loss mask over every real row (verl
    #6475): the loss reads the next sequence's first token as the label of a sequence's last
    token; the tier reads the target's own labels and mask and names it (R-MODEL-4)."""
    report = run_suite("model_fakes:FlatRollMaskTarget", tmp_path, f"{MODEL}::test_model_thd")
    got = _failure(report, "test_model_thd")
    assert got["rules"] == ["R-MODEL-4"], got
    assert "the loss reads a label at sequence 0 token 4, its last" in got["message"], \
        got["message"]
    assert "token 0 of sequence 2" in got["message"], got["message"]
